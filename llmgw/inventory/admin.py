"""Admin: read-mostly where agents own the data. An operator edits cordons
and their own labels here; what an agent reports is shown, not edited,
because the next heartbeat would overwrite it anyway."""

from django.contrib import admin

from llmgw.inventory.models import (
    AGENT_OWNED_FIELDS,
    AuditEvent,
    Filesystem,
    Gpu,
    ModelHolding,
    Node,
)

# What the agent reports, and the times and states the control plane keeps
# about it: shown, never edited here.
READ_ONLY = [
    "state",
    *AGENT_OWNED_FIELDS,
    "last_heartbeat_at",
    "measured_at",
    "cpu_utilization_percent",
    "load1",
    "load5",
    "load15",
    "memory_used_bytes",
    "memory_available_bytes",
    "collectors",
    "weights_probed",
    "revoked_at",
    "cordoned_by",
    "cordoned_at",
]


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


class GpuInline(ReadOnlyInline):
    model = Gpu


class FilesystemInline(ReadOnlyInline):
    model = Filesystem


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "state",
        "cordoned",
        "cpus",
        "memory_total_bytes",
        "agent_version",
        "simulated",
    ]
    list_filter = ["state", "cordoned", "simulated"]
    search_fields = ["name"]
    readonly_fields = READ_ONLY
    exclude = [
        "credential_hash",
        "join_token_hash",
        "join_token_expires_at",
        "filesystems_digest",
        "weights_digest",
    ]
    inlines = [GpuInline, FilesystemInline]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        # Nodes join with a token (`llmgw node add`), never by hand here.
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(Gpu)
class GpuAdmin(ReadOnlyAdmin):
    list_display = ["node", "index", "gpu_class", "uuid", "ecc_uncorrected", "foreign_processes"]
    list_filter = ["gpu_class"]


@admin.register(Filesystem)
class FilesystemAdmin(ReadOnlyAdmin):
    list_display = ["node", "mount", "fstype", "shared", "free_bytes", "total_bytes"]
    list_filter = ["shared", "fstype"]


@admin.register(ModelHolding)
class ModelHoldingAdmin(ReadOnlyAdmin):
    list_display = ["model_name", "node", "path", "shared"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "action", "node_name", "actor", "detail"]
    list_filter = ["action"]
