"""The catalog's serializers: a profile as the API shows it, and the
bounded fields every write of catalog figures goes through."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from llmgw.catalog.loader import LIMITS
from llmgw.catalog.models import Profile


class ProfileSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    class Meta:
        model = Profile
        fields = [
            "name",
            "priority",
            "gpu_class",
            "gpus_per_shard",
            "tensor_parallel",
            "nodes_per_replica",
            "min_memory_gb",
            "memory_gb",
            "cpu_cores",
            "engine",
            "engine_version",
            "args",
            "node_selector",
            "fabric",
        ]


def _bounded(field: type[serializers.Field], key: str, **kwargs: Any) -> Any:
    """A number within the catalog's bounds for `key` (loader.LIMITS): past
    them the column overflows (a 500) or a page that reads it breaks."""
    low, high = LIMITS[key]
    return field(min_value=low, max_value=high, required=False, **kwargs)


class CountsSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    always_running = _bounded(serializers.IntegerField, "always_running")
    under_load = _bounded(serializers.IntegerField, "under_load")


class ResourcesSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    memory_gb = _bounded(serializers.FloatField, "memory_gb", allow_null=True)
    cpu_cores = _bounded(serializers.IntegerField, "cpu_cores", allow_null=True)
    profile = serializers.CharField(max_length=100, required=False, allow_null=True)
