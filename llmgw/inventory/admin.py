"""Admin: read-mostly where agents own the data. An operator edits cordons
and their own labels here; what an agent reports is shown, not edited,
because the next heartbeat would overwrite it anyway.

The other apps' admins build on ReadOnlyAdmin and ReadOnlyInline below:
the inventory is the lowest app with an admin that they may all import."""

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from llmgw.accounts.models import NodeCertificate
from llmgw.inventory import services
from llmgw.inventory.models import (
    AGENT_OWNED_FIELDS,
    AgentCommand,
    AuditEvent,
    Filesystem,
    Gpu,
    Hearing,
    ModelHolding,
    Node,
    StalenessPass,
)

# Never in a form or a list: the credential and join-token hashes (nobody
# needs to read one, and a page travels further than the database does),
# and the digests that only tell a heartbeat "unchanged since last time".
NODE_HIDDEN = [
    "credential_hash",
    "join_token_hash",
    "join_token_expires_at",
    "filesystems_digest",
    "weights_digest",
    "gpu_state_digest",
    "gpu_health_digest",
    "ports_digest",
    "managers_digest",
    "shards_digest",
]
# What an operator owns on a node; everything else the agent reports or the
# control plane works out, and the next heartbeat would overwrite an edit.
OPERATOR_FIELDS = ["cordoned", "cordon_reason", "operator_labels"]
READ_ONLY = [
    "name",
    "state",
    *AGENT_OWNED_FIELDS,
    *(
        f.name
        for f in Node._meta.concrete_fields
        if f.name not in {"id", "name", "state", *AGENT_OWNED_FIELDS}
        and f.name not in OPERATOR_FIELDS
        and f.name not in NODE_HIDDEN
    ),
]


class ReadOnlyInline(admin.TabularInline):  # type: ignore[misc]  # Django ships no types
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no types
    """Shown, never added, edited or deleted here: an agent or the control
    plane owns the rows, and an edit would be overwritten by the next report
    or reconcile, or would leave derived state that no longer adds up."""

    # Said above the list: where the rows come from, and how to change them.
    description = ""

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"subtitle": self.description or None, **(extra_context or {})}
        return super().changelist_view(request, context)


class GpuInline(ReadOnlyInline):
    model = Gpu


class FilesystemInline(ReadOnlyInline):
    model = Filesystem


class NodeForm(forms.ModelForm):  # type: ignore[misc]  # Django ships no types
    class Meta:
        model = Node
        fields = OPERATOR_FIELDS

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("cordoned") and not (data.get("cordon_reason") or "").strip():
            # As the cordon service and the CLI insist: the next operator will ask why.
            self.add_error("cordon_reason", "a cordon needs a reason")
        if not isinstance(data.get("operator_labels", {}), dict):
            self.add_error("operator_labels", "labels are an object of key: value")
        cleaned: dict[str, Any] = data
        return cleaned


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no types
    form = NodeForm
    list_display = [
        "name",
        "state",
        "cordoned",
        "cpus",
        "memory_total_bytes",
        "agent_version",
        "last_heartbeat_at",
        "simulated",
    ]
    list_filter = ["state", "cordoned", "simulated"]
    search_fields = ["name", "address"]
    readonly_fields = READ_ONLY
    exclude = NODE_HIDDEN
    inlines = [GpuInline, FilesystemInline]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        # Nodes join with a token (`llmgw node add`), never by hand here.
        return False

    def save_model(self, request: HttpRequest, obj: Node, form: Any, change: bool) -> None:
        # Through the services, as the CLI goes: they record who and when,
        # audit it, and write only their own columns, so a heartbeat stored
        # while this form was open is not written back over.
        actor = request.user.get_username()
        if "operator_labels" in form.changed_data:
            before = form.initial.get("operator_labels") or {}
            after = obj.operator_labels or {}
            labels: dict[str, str | None] = {k: None for k in before if k not in after}
            labels.update(after)
            services.set_labels(obj.name, labels, actor)
        if {"cordoned", "cordon_reason"} & set(form.changed_data):
            if obj.cordoned:
                services.cordon(obj.name, obj.cordon_reason, actor)
            else:
                services.uncordon(obj.name, actor, "from the admin")


@admin.register(Gpu)
class GpuAdmin(ReadOnlyAdmin):
    description = "Reported by each node's agent; cordon the node to keep work off a card."
    list_display = [
        "node",
        "index",
        "gpu_class",
        "uuid",
        "missing",
        "ecc_uncorrected",
        "nvlink_degraded",
        "unhealthy_reason",
    ]
    list_filter = ["gpu_class", "missing", "nvlink_degraded"]
    search_fields = ["node__name", "uuid", "pci_bus_id", "nvlink_domain"]
    list_select_related = ["node"]


@admin.register(Filesystem)
class FilesystemAdmin(ReadOnlyAdmin):
    description = "Reported by each node's agent."
    list_display = ["node", "mount", "fstype", "shared", "free_bytes", "total_bytes"]
    list_filter = ["shared", "fstype"]
    search_fields = ["node__name", "mount", "device"]
    list_select_related = ["node"]


@admin.register(ModelHolding)
class ModelHoldingAdmin(ReadOnlyAdmin):
    description = "Weights each node's agent reports holding."
    list_display = ["model_name", "node", "path", "shared"]
    list_filter = ["shared"]
    search_fields = ["model_name", "node__name", "path"]
    list_select_related = ["node"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    description = "The record of who did what; kept, never edited."
    list_display = ["at", "action", "node_name", "actor", "detail"]
    list_filter = ["action"]
    search_fields = ["node_name", "actor", "action", "detail"]


@admin.register(AgentCommand)
class AgentCommandAdmin(ReadOnlyAdmin):
    description = (
        "Commands sent to agents over their stream, and what they answered; "
        "the agent and the expiry task own the state."
    )
    list_display = [
        "created_at",
        "node",
        "kind",
        "state",
        "requested_by",
        "sent_at",
        "finished_at",
    ]
    list_filter = ["state", "kind"]
    search_fields = ["node__name", "kind", "requested_by"]
    list_select_related = ["node"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentCommand]:
        # A command's output can be long; the list never shows it.
        qs = super().get_queryset(request)
        match = request.resolver_match
        if match and (match.url_name or "").endswith("_changelist"):
            qs = qs.defer("output", "error")
        return qs


@admin.register(StalenessPass)
class StalenessPassAdmin(ReadOnlyAdmin):
    description = "When the staleness check last ran: the periodic schedule is alive."
    list_display = ["id", "last_pass_at"]


@admin.register(Hearing)
class HearingAdmin(ReadOnlyAdmin):
    description = (
        "When the control plane could hear its fleet: the web processes write "
        "this row; a node's silence counts only from `since`."
    )
    list_display = ["id", "since", "heard_at"]


# Here rather than in accounts' admin: a node's certificates are part of its
# identity, and the read-only admin is the inventory's (accounts imports no app).
@admin.register(NodeCertificate)
class NodeCertificateAdmin(ReadOnlyAdmin):
    description = (
        "Certificates the node CA signed: `llmgw node add NAME --cert`, or the agent's "
        "renewal. `llmgw node revoke NAME` revokes all of a node's."
    )
    list_display = ["node_name", "serial", "not_after", "issued_by", "revoked_at"]
    list_filter = ["revoked_at", "issued_by"]
    search_fields = ["node_name", "serial"]
