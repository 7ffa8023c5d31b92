"""Admin for fabrics: what the hardware says, worked out by the control
plane from every node's ports, subnet managers and ibnetdiscover dumps. All
of it is derived (llmgw.fabrics.services, sweep), so it is shown, never
edited or deleted here: the next heartbeat or sweep would rewrite an edit,
and a fabric's identity and master are agreed across nodes, not set."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from llmgw.fabrics.models import (
    FabricMap,
    ManagerObservation,
    MasterChange,
    PhysicalFabric,
    Port,
    SubnetManager,
)
from llmgw.inventory.admin import ReadOnlyAdmin, ReadOnlyInline

REPORTED = "Worked out from what the nodes' agents report; read-only, the next report rewrites it."


class SubnetManagerInline(ReadOnlyInline):
    model = SubnetManager


@admin.register(PhysicalFabric)
class PhysicalFabricAdmin(ReadOnlyAdmin):
    description = REPORTED
    list_display = ["identity", "kind", "master_guid", "master_priority", "first_seen", "last_seen"]
    list_filter = ["kind"]
    search_fields = ["identity", "master_guid"]
    inlines = [SubnetManagerInline]


@admin.register(SubnetManager)
class SubnetManagerAdmin(ReadOnlyAdmin):
    description = REPORTED
    list_display = ["guid", "fabric", "state", "priority", "lid", "last_seen"]
    list_filter = ["state", "fabric"]
    search_fields = ["guid", "fabric__identity"]
    list_select_related = ["fabric"]


@admin.register(ManagerObservation)
class ManagerObservationAdmin(ReadOnlyAdmin):
    description = (
        "Each subnet manager as one node last saw it; a node writes only its own rows, "
        "and the fabric's managers and master are agreed from all of them."
    )
    list_display = ["guid", "fabric", "node", "state", "priority", "master", "seen_at"]
    list_filter = ["state", "master", "fabric"]
    search_fields = ["guid", "node__name", "fabric__identity"]
    list_select_related = ["fabric", "node"]


@admin.register(MasterChange)
class MasterChangeAdmin(ReadOnlyAdmin):
    description = "Every change of subnet manager master a port reported; kept as a record."
    list_display = ["at", "fabric", "previous_guid", "master_guid", "reported_by"]
    list_filter = ["fabric"]
    search_fields = ["master_guid", "previous_guid", "reported_by", "fabric__identity"]
    list_select_related = ["fabric"]


@admin.register(Port)
class PortAdmin(ReadOnlyAdmin):
    description = REPORTED
    list_display = [
        "__str__",
        "link_layer",
        "state",
        "phys_state",
        "rate_gbps",
        "physical_fabric",
        "declared_fabric",
        "updated_at",
    ]
    list_filter = ["link_layer", "state", "phys_state", "physical_fabric"]
    search_fields = [
        "node__name",
        "device",
        "port_guid",
        "node_guid",
        "sm_guid",
        "declared_fabric",
        "roce_network",
    ]
    list_select_related = ["node", "physical_fabric"]


@admin.register(FabricMap)
class FabricMapAdmin(ReadOnlyAdmin):
    description = (
        "The last ibnetdiscover of each fabric, parsed by the control plane; "
        "the drawing is at /admin/fabrics."
    )
    list_display = ["fabric", "taken_at", "source_node", "error_at", "error_line"]
    search_fields = ["fabric__identity", "source_node"]
    list_select_related = ["fabric"]
    # A big fabric's analysis is megabytes: loaded for no list, rendered on
    # no page. Its summary says what an operator looks for here.
    exclude = ["analysis"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[FabricMap]:
        return super().get_queryset(request).defer("analysis")
