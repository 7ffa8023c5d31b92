"""Validation of agent payloads (docs/agent-protocol.md, schema 1).

Every field is checked before anything is stored, so a bad payload is
refused whole with each bad field named."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from llmgw.inventory.api import telemetry_schema as t

SCHEMA = 1
# Byte counts are stored in 64-bit columns: a bigger number is a bad payload (400), not a 500.
MAX_BYTES = 2**63 - 1
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"


class SchemaField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        value = super().to_internal_value(data)
        if value != SCHEMA:
            raise serializers.ValidationError(
                f"schema {value} is not supported; this server speaks {SCHEMA}"
            )
        return value


class Envelope(serializers.Serializer):
    schema = SchemaField()
    node = serializers.RegexField(NAME)


class JoinSerializer(Envelope):
    token = serializers.CharField(max_length=200, trim_whitespace=True)


class SystemSerializer(serializers.Serializer):
    os = serializers.CharField(max_length=200, allow_null=True, allow_blank=True, required=False)
    kernel = serializers.CharField(
        max_length=200, allow_null=True, allow_blank=True, required=False
    )
    arch = serializers.CharField(max_length=64, allow_null=True, allow_blank=True, required=False)
    cpu_model = serializers.CharField(
        max_length=200, allow_null=True, allow_blank=True, required=False
    )
    cpu_flags = serializers.ListField(
        child=serializers.CharField(max_length=32), max_length=256, required=False
    )
    cpus = serializers.IntegerField(min_value=1, max_value=65536, allow_null=True, required=False)
    memory_total_bytes = serializers.IntegerField(
        min_value=0, max_value=MAX_BYTES, allow_null=True, required=False
    )
    nvidia_driver = serializers.CharField(
        max_length=64, allow_null=True, allow_blank=True, required=False
    )


class FabricSerializer(serializers.Serializer):
    name = serializers.RegexField(NAME)
    adapters = serializers.ListField(child=serializers.CharField(max_length=64), max_length=64)
    rate_gbps = serializers.FloatField(min_value=0, allow_null=True, required=False)


class RegisterSerializer(Envelope):
    agent_version = serializers.CharField(max_length=64)
    features = serializers.ListField(
        child=serializers.CharField(max_length=64), max_length=128, required=False
    )
    probed = serializers.BooleanField(required=False, default=False)
    simulated = serializers.BooleanField(required=False, default=False)
    heartbeat_interval_s = serializers.IntegerField(
        min_value=1, max_value=3600, required=False, default=10
    )
    labels = serializers.DictField(child=serializers.CharField(max_length=253), required=False)
    system = SystemSerializer()
    gpus = t.listing(t.GpuIdentity, 256)
    gpu_topology = t.MsgspecField(t.GpuTopology, required=False)
    imex = t.MsgspecField(t.Imex, required=False)
    fabrics = FabricSerializer(many=True, required=False)

    def validate_gpus(self, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        indices = [gpu["index"] for gpu in gpus]
        if len(indices) != len(set(indices)):
            raise serializers.ValidationError("two GPUs share one index")
        return gpus


class CpuSerializer(serializers.Serializer):
    utilization_percent = serializers.FloatField(min_value=0, max_value=100, allow_null=True)
    load = serializers.ListField(
        child=serializers.FloatField(min_value=0), min_length=3, max_length=3
    )


class MemorySerializer(serializers.Serializer):
    used_bytes = serializers.IntegerField(min_value=0, max_value=MAX_BYTES, allow_null=True)
    available_bytes = serializers.IntegerField(min_value=0, max_value=MAX_BYTES, allow_null=True)


class FilesystemSerializer(serializers.Serializer):
    mount = serializers.CharField(max_length=1024)
    device = serializers.CharField(max_length=1024, required=False, allow_blank=True)
    fstype = serializers.CharField(max_length=64, required=False, allow_blank=True)
    shared = serializers.BooleanField()
    free_bytes = serializers.IntegerField(min_value=0, max_value=MAX_BYTES)
    total_bytes = serializers.IntegerField(min_value=0, max_value=MAX_BYTES)
    dirs = serializers.ListField(
        child=serializers.CharField(max_length=1024), max_length=64, required=False
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["free_bytes"] > attrs["total_bytes"]:
            raise serializers.ValidationError({"free_bytes": "is larger than total_bytes"})
        return attrs


class ModelSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=255)
    path = serializers.CharField(max_length=1024)
    shared = serializers.BooleanField()


class WeightsSerializer(serializers.Serializer):
    probed = serializers.BooleanField()
    models = ModelSerializer(many=True, max_length=10000)


class CollectorSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    ok = serializers.BooleanField()
    seconds = serializers.FloatField(min_value=0)
    error = serializers.CharField(max_length=2000, allow_null=True, required=False)


class HeartbeatSerializer(Envelope):
    sent_at = serializers.DateTimeField(required=False)
    cpu = CpuSerializer(required=False)
    memory = MemorySerializer(required=False)
    filesystems = FilesystemSerializer(many=True, required=False, max_length=256)
    weights = WeightsSerializer(required=False)
    collectors = CollectorSerializer(many=True, required=False, max_length=64)
    gpus = t.listing(t.GpuSample, 256)
    sensors = t.MsgspecField(t.Sensors, required=False)
    imex = t.MsgspecField(t.Imex, required=False)
    sxids = t.MsgspecField(t.XidCounters, required=False)
    xids_unattributed = t.MsgspecField(t.XidCounters, required=False)
    engines = t.listing(t.Engine, 64)
    ports = t.listing(t.PortSample, 256)
    shards = t.listing(t.ShardReport, 256)
    fabrics_changed = serializers.BooleanField(required=False)
    fabrics_active = serializers.ListField(
        child=serializers.CharField(max_length=64), max_length=64, required=False
    )
    subnet_managers = t.listing(t.ManagerListing, 256)
    notices = serializers.ListField(
        child=serializers.CharField(max_length=2000), max_length=32, required=False
    )
    engines_probed = serializers.BooleanField(required=False)
    warnings = serializers.ListField(
        child=serializers.CharField(max_length=2000), max_length=32, required=False
    )

    def validate_filesystems(self, filesystems: list[dict[str, Any]]) -> list[dict[str, Any]]:
        mounts = [fs["mount"] for fs in filesystems]
        if len(mounts) != len(set(mounts)):
            raise serializers.ValidationError(
                "a mount is reported twice; report each filesystem once"
            )
        return filesystems


def flatten_errors(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error structure as {"filesystems.0.free_bytes": [...]}:
    an agent author reads one flat list and knows which field to fix."""
    flat: dict[str, list[str]] = {}
    if isinstance(errors, dict):
        for key, value in errors.items():
            name = (
                prefix
                if key == "non_field_errors" and prefix
                else f"{prefix}.{key}"
                if prefix
                else key
            )
            flat.update(flatten_errors(value, name))
    elif isinstance(errors, list) and errors and all(isinstance(e, (dict, list)) for e in errors):
        for i, value in enumerate(errors):
            flat.update(flatten_errors(value, f"{prefix}.{i}"))
    elif isinstance(errors, list):
        flat.setdefault(prefix or "payload", []).extend(str(e) for e in errors)
    else:
        flat.setdefault(prefix or "payload", []).append(str(errors))
    return {k: v for k, v in flat.items() if v}
