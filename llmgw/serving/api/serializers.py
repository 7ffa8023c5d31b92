"""A held model as the API shows it: its catalog entry and the replicas
that serve it, with what they reserved against what their nodes measured."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from llmgw.catalog.api.serializers import ProfileSerializer
from llmgw.catalog.models import Model
from llmgw.locations import location
from llmgw.serving import held, weights
from llmgw.serving.models import Replica
from llmgw.units import GiB, format_bytes, format_bytes_pair


def measured(shard: Any) -> dict[str, Any]:
    """The shard's cores and memory as its node last measured them (the
    process group's), or {} when not measured."""
    for sample in shard.node.shard_samples or []:
        if sample.get("id") == shard.shard_id:
            return {k: sample.get(k) for k in ("cpu_cores", "memory_bytes")}
    return {}


class ReplicaSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    profile = serializers.CharField(source="profile.name")
    nodes = serializers.SerializerMethodField()
    age_s = serializers.SerializerMethodField()
    warnings = serializers.SerializerMethodField()

    class Meta:
        model = Replica
        fields = [
            "id",
            "profile",
            "state",
            "fabric",
            "nodes",
            "created_at",
            "age_s",
            "env",
            "warnings",
        ]

    def get_nodes(self, replica: Replica) -> list[dict[str, Any]]:
        profile = replica.profile
        out = []
        for s in replica.shards.all():
            m = measured(s)
            out.append(
                {
                    "node": s.node.name,
                    # Its place in the facility tree ("-/hall1/row01/r01:r01-pdu0"); "" unknown.
                    "location": location(s.node.labels),
                    "rank": s.rank,
                    "state": s.state,
                    "url": s.url or None,
                    "gpus": s.gpu_indices,
                    "adapters": s.adapters,
                    "restarts": s.restarts,
                    "message": s.message or None,
                    "cpu_cores": m.get("cpu_cores"),
                    "memory_bytes": m.get("memory_bytes"),
                    "reserved_cores": profile.cpu_cores or None,
                    # memory_gb is GiB, as everywhere (llmgw.units).
                    "reserved_memory_bytes": int(profile.memory_gb * GiB)
                    if profile.memory_gb
                    else None,
                }
            )
        return out

    def get_warnings(self, replica: Replica) -> list[str]:
        """Declared against measured: a model that outgrew what it reserved is
        what fills a node that placement thinks has room."""
        out = []
        for node in self.get_nodes(replica):
            reserved, used = node["reserved_memory_bytes"], node["memory_bytes"]
            if reserved is not None and used is not None and used > reserved:
                uses, of = format_bytes_pair(used, reserved)
                out.append(
                    f"{node['node']}: uses {uses} of memory, reserved {of}; "
                    "raise it with llmgw ctl model resources"
                )
            elif reserved is None and used is not None:
                out.append(f"{node['node']}: uses {format_bytes(used)} of memory and reserves none")
            cores, busy = node["reserved_cores"], node["cpu_cores"]
            if cores is not None and busy is not None and busy > cores * 1.1:
                out.append(f"{node['node']}: busy on {busy:.1f} cores, reserved {cores}")
        return out

    def get_age_s(self, replica: Replica) -> float:
        age: timedelta = timezone.now() - replica.created_at
        return round(age.total_seconds(), 1)


class FabricWeightsSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    """One physical fabric (or, with fabric null, the nodes on none known)
    and which of its nodes hold a model's weights."""

    fabric = serializers.CharField(allow_null=True, help_text="physical fabric identity")
    label = serializers.CharField(help_text='its agent.yaml name(s), or "no fabric known"')
    kind = serializers.CharField(allow_null=True)
    names = serializers.ListField(child=serializers.CharField())
    nodes = serializers.IntegerField(help_text="nodes on the fabric")
    holders = serializers.ListField(child=serializers.CharField(), help_text="those holding it")


class ModelSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    profiles = ProfileSerializer(many=True, read_only=True)
    replicas = ReplicaSerializer(many=True, read_only=True)
    weights_by_fabric = serializers.SerializerMethodField()
    held = serializers.SerializerMethodField()

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
            "weights_by_fabric",
            "held",
        ]

    def get_held(self, model: Model) -> dict[str, Any]:
        """Ready against the count held now, a word for where it stands
        (llmgw.serving.held.STATES) and the last placement attempt."""
        return held.summary(model)

    @extend_schema_field(FabricWeightsSerializer(many=True))
    def get_weights_by_fabric(self, model: Model) -> list[dict[str, Any]]:
        # Loaded once per answer and kept in the (root's) context, so a list
        # of every model costs the same few queries as one model.
        table: weights.WeightsByFabric | None = self.context.get("weights_by_fabric")
        if table is None:
            table = self.context["weights_by_fabric"] = weights.load()
        return table.for_model(model.name)
