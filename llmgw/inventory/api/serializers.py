"""What operators read. Unknown stays null: an old agent is not a small
machine, and a node with no model directories is not a full disk."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from llmgw.inventory import services
from llmgw.inventory.models import SYSTEM_TEXT_FIELDS, Filesystem, Gpu, ModelHolding, Node


class FilesystemSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    class Meta:
        model = Filesystem
        fields = ["mount", "device", "fstype", "shared", "free_bytes", "total_bytes", "dirs"]


class GpuSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    healthy = serializers.BooleanField(read_only=True)
    unhealthy_reason = serializers.CharField(read_only=True)

    class Meta:
        model = Gpu
        fields = [
            "index",
            "uuid",
            "name",
            "gpu_class",
            "memory_total_bytes",
            "ecc_uncorrected",
            "foreign_processes",
            "healthy",
            "unhealthy_reason",
        ]


class HoldingSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    class Meta:
        model = ModelHolding
        fields = ["model_name", "path", "shared"]


def _disk(filesystems: list[Filesystem], shared: bool) -> dict[str, int] | None:
    chosen = [fs for fs in filesystems if fs.shared == shared]
    if not chosen:
        return None
    return {
        "free_bytes": sum(fs.free_bytes for fs in chosen),
        "total_bytes": sum(fs.total_bytes for fs in chosen),
    }


class NodeSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    state = serializers.SerializerMethodField()
    labels = serializers.DictField(child=serializers.CharField(), read_only=True)
    filesystems = FilesystemSerializer(many=True, read_only=True)
    disk_local = serializers.SerializerMethodField()
    disk_shared = serializers.SerializerMethodField()
    gpus = GpuSerializer(many=True, read_only=True)
    gpu_classes = serializers.SerializerMethodField()
    holdings = HoldingSerializer(many=True, read_only=True)
    measurements_fresh = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "name",
            "state",
            "simulated",
            "cordoned",
            "cordon_reason",
            "cordoned_by",
            "cordoned_at",
            "labels",
            "agent_labels",
            "operator_labels",
            "agent_version",
            "features",
            "probed",
            "os",
            "kernel",
            "arch",
            "cpu_model",
            "cpu_flags",
            "cpus",
            "memory_total_bytes",
            "nvidia_driver",
            "fabrics",
            "heartbeat_interval_s",
            "registered_at",
            "last_heartbeat_at",
            "measured_at",
            "measurements_fresh",
            "cpu_utilization_percent",
            "load1",
            "load5",
            "load15",
            "memory_used_bytes",
            "memory_available_bytes",
            "collectors",
            "weights_probed",
            "engines",
            "engines_probed",
            "warnings",
            "notices",
            "filesystems",
            "disk_local",
            "disk_shared",
            "gpus",
            "gpu_classes",
            "holdings",
        ]

    def __init__(self, *args: Any, fields: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # ?fields=: only these, so a client asks for what it prints.
        if fields is not None:
            for name in set(self.fields) - set(fields):
                self.fields.pop(name)

    @extend_schema_field(serializers.ChoiceField(choices=["Ready", "NotReady"]))
    def get_state(self, node: Node) -> str:
        return services.effective_state(node, self.context.get("now"))

    # A list page hands in what the database summed for the whole page
    # (context "disks", "gpu_classes"); one node counts its own rows.
    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_disk_local(self, node: Node) -> dict[str, int] | None:
        if "disks" in self.context:
            local: dict[str, int] | None = self.context["disks"].get((node.pk, False))
            return local
        return _disk(list(node.filesystems.all()), shared=False)

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_disk_shared(self, node: Node) -> dict[str, int] | None:
        if "disks" in self.context:
            shared: dict[str, int] | None = self.context["disks"].get((node.pk, True))
            return shared
        return _disk(list(node.filesystems.all()), shared=True)

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_gpu_classes(self, node: Node) -> dict[str, int]:
        """Cards per class ("" for a card that did not say): what a list
        prints of a node's GPUs, without every card's row."""
        counted = self.context.get("gpu_classes")
        if counted is not None:
            return dict(counted.get(node.pk, {}))
        out: dict[str, int] = {}
        for g in node.gpus.all():
            out[g.gpu_class] = out.get(g.gpu_class, 0) + 1
        return out

    def get_measurements_fresh(self, node: Node) -> bool:
        if node.measured_at is None:
            return False
        now = self.context.get("now") or timezone.now()
        return bool((now - node.measured_at).total_seconds() <= settings.MEASUREMENT_MAX_AGE_S)

    def to_representation(self, instance: Node) -> dict[str, Any]:
        return _unset_is_null(super().to_representation(instance))

    def plain_rows(self, rows: list[Any]) -> list[dict[str, Any]]:
        """Rows that carry every column the fields read (a page of plain
        values), each as to_representation writes it. Each field's own
        conversion is called directly: DRF's per-field attribute lookup,
        made for any object, was most of a 1,000-node page's time."""
        plan = []
        for f in self._readable_fields:
            source = None if f.source == "*" else f.source
            if source is not None and "." in source:
                raise ValueError(f"{f.field_name}: a dotted source is not a plain column")
            plan.append((f.field_name, source, f.to_representation))
        out = []
        for row in rows:
            data = {}
            for name, source, represent in plan:
                value = row if source is None else getattr(row, source)
                data[name] = None if value is None else represent(value)
            out.append(_unset_is_null(data))
        return out


def _unset_is_null(data: dict[str, Any]) -> dict[str, Any]:
    # Free-form JSON columns default to "" in the table; say null instead.
    for key in (*SYSTEM_TEXT_FIELDS, "agent_version"):
        if key in data:
            data[key] = data[key] or None
    return data


class NodePageSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    """One page of the node list (the schema of its answer)."""

    count = serializers.IntegerField(help_text="nodes the filters pick, on every page")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = NodeSerializer(many=True)


class GpuClassCountSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    gpu_class = serializers.CharField(allow_null=True)
    count = serializers.IntegerField()
    ready = serializers.IntegerField(help_text="of count, on Ready nodes")
    not_ready = serializers.IntegerField(help_text="of count, on NotReady nodes")
    unhealthy = serializers.IntegerField()
    nodes = serializers.IntegerField()


class WeightsCountSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    model = serializers.CharField()
    nodes = serializers.IntegerField()


class SummarySerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    """The fleet in numbers (the schema of /api/v1/nodes/summary)."""

    nodes = serializers.IntegerField()
    ready = serializers.IntegerField()
    not_ready = serializers.IntegerField()
    cordoned = serializers.IntegerField()
    cpus = serializers.IntegerField(allow_null=True, help_text="of the nodes that said")
    cpus_unknown = serializers.IntegerField(help_text="nodes that did not say")
    memory_total_bytes = serializers.IntegerField(allow_null=True)
    memory_unknown = serializers.IntegerField()
    gpus = GpuClassCountSerializer(many=True)
    weights = WeightsCountSerializer(many=True)


class CordonSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    reason = serializers.CharField(max_length=500, allow_blank=True, required=False, default="")


class LabelsSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    labels = serializers.DictField(child=serializers.CharField(max_length=253, allow_null=True))
