"""Admin for serving. Replicas, shards and their claims are placement's
decisions and the agents' reports; the reconciler's and placement's
records are its memory. All are shown, never edited or deleted here: a
deleted replica would leave its engines running on the nodes (their desired
state is rebuilt only by the services), and an edited claim could hand out
one GPU twice. API keys are the operators': named, scoped and revoked here."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from llmgw.inventory.admin import ReadOnlyAdmin, ReadOnlyInline
from llmgw.serving.models import (
    ApiKey,
    GpuClaim,
    HeldState,
    KeyUsage,
    PlacementRecord,
    Replica,
    Shard,
)

PLACED = (
    "Placement's decisions and the agents' reports on them. Read-only: change "
    "how many replicas run with `llmgw ctl model scale`, or place one now with "
    "`llmgw ctl place`."
)


class ShardInline(ReadOnlyInline):
    model = Shard
    fields = ["rank", "node", "state", "gpu_indices", "url", "pid", "restarts", "reported_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Shard]:
        return super().get_queryset(request).select_related("node", "replica__model")


@admin.register(Replica)
class ReplicaAdmin(ReadOnlyAdmin):
    description = PLACED
    list_display = [
        "__str__",
        "model",
        "profile",
        "state",
        "fabric",
        "created_at",
        "state_changed_at",
    ]
    list_filter = ["state", "model"]
    search_fields = ["model__name", "profile__name", "fabric"]
    list_select_related = ["model", "profile__model"]
    inlines = [ShardInline]


@admin.register(Shard)
class ShardAdmin(ReadOnlyAdmin):
    description = PLACED
    list_display = [
        "shard_id",
        "replica",
        "node",
        "rank",
        "state",
        "url",
        "pid",
        "restarts",
        "generation",
        "reported_at",
    ]
    list_filter = ["state"]
    search_fields = ["node__name", "replica__model__name", "url"]
    list_select_related = ["replica__model", "node"]


@admin.register(GpuClaim)
class GpuClaimAdmin(ReadOnlyAdmin):
    description = (
        "The GPUs each shard holds, one row per card: the database refuses a card "
        "claimed twice. Released with their replica, never by hand."
    )
    list_display = ["node", "index", "shard"]
    search_fields = ["node__name", "shard__replica__model__name"]
    list_select_related = ["node", "shard__node", "shard__replica__model"]


@admin.register(HeldState)
class HeldStateAdmin(ReadOnlyAdmin):
    description = "The reconciler's memory of each held model's load; it owns these rows."
    list_display = ["model", "target", "queue_depth", "loaded_since", "idle_since", "updated_at"]
    search_fields = ["model__name"]
    list_select_related = ["model"]


@admin.register(PlacementRecord)
class PlacementRecordAdmin(ReadOnlyAdmin):
    description = (
        "The last placement attempt per model, placed or refused, as "
        "`llmgw ctl explain` shows it; placement owns these rows."
    )
    list_display = ["model", "at", "placed", "placed_replica"]
    list_filter = ["placed"]
    search_fields = ["model__name"]
    list_select_related = ["model"]


@admin.register(KeyUsage)
class KeyUsageAdmin(ReadOnlyAdmin):
    description = (
        "Requests and tokens each key used on each model, from the engines' own "
        "counts; the gateway adds to these rows, so they are never edited here."
    )
    list_display = [
        "api_key",
        "model",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "updated_at",
    ]
    search_fields = ["api_key__name", "api_key__prefix", "model"]
    list_select_related = ["api_key"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no types
    list_display = [
        "name",
        "prefix",
        "owner",
        "all_models",
        "requests_per_minute",
        "tokens_per_minute",
        "max_concurrent_requests",
        "created_at",
        "revoked_at",
        "last_used_at",
    ]
    list_filter = ["all_models", "revoked_at"]
    search_fields = ["name", "prefix"]
    list_select_related = ["owner"]
    filter_horizontal = ["allowed_models"]
    readonly_fields = ["prefix", "created_at", "revoked_at", "last_used_at"]
    # The key's hash: whoever reads it can match a key to it offline, and no
    # operator needs it; the prefix tells keys apart.
    exclude = ["digest"]
    actions = ["revoke"]

    # A key is shown once, when it is made; the admin never sees one, so
    # keys are created with `llmgw ctl keys create` or POST /api/v1/keys.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected keys")  # type: ignore[untyped-decorator]  # Django ships no types
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(
            request, f"{count} key(s) revoked; the gateway refuses them within seconds"
        )
