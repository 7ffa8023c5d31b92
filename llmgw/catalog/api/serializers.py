from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from llmgw.catalog.models import Model, Profile
from llmgw.serving.models import Replica


class ProfileSerializer(serializers.ModelSerializer):
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


class ReplicaSerializer(serializers.ModelSerializer):
    profile = serializers.CharField(source="profile.name")
    nodes = serializers.SerializerMethodField()
    age_s = serializers.SerializerMethodField()

    class Meta:
        model = Replica
        fields = ["id", "profile", "state", "fabric", "nodes", "created_at", "age_s", "env"]

    def get_nodes(self, replica: Replica) -> list[dict[str, Any]]:
        return [
            {"node": s.node.name, "rank": s.rank, "gpus": s.gpu_indices, "adapters": s.adapters}
            for s in replica.shards.all()
        ]

    def get_age_s(self, replica: Replica) -> float:
        return round((timezone.now() - replica.created_at).total_seconds(), 1)


class ModelSerializer(serializers.ModelSerializer):
    profiles = ProfileSerializer(many=True, read_only=True)
    replicas = ReplicaSerializer(many=True, read_only=True)

    class Meta:
        model = Model
        fields = [
            "name",
            "source",
            "weights",
            "always_running",
            "under_load",
            "profiles",
            "replicas",
        ]


class CountsSerializer(serializers.Serializer):
    always_running = serializers.IntegerField(min_value=0, required=False)
    under_load = serializers.IntegerField(min_value=0, required=False)


class ResourcesSerializer(serializers.Serializer):
    memory_gb = serializers.FloatField(min_value=0, required=False, allow_null=True)
    cpu_cores = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    profile = serializers.CharField(required=False, allow_null=True)
