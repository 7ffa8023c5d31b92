"""/api/v1/: one router for every app's operator API."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from llmgw.fabrics.api.ports import PortListView
from llmgw.fabrics.api.views import FabricListView, FabricTestView, TopologyView
from llmgw.facility.api import FacilityView, HoldView, ReleaseView
from llmgw.inventory.api.views import NodeViewSet
from llmgw.nvlink.api import NvlinkView
from llmgw.serving.api.keys import ApiKeyViewSet
from llmgw.serving.api.models import ModelViewSet
from llmgw.serving.api.replicas import ReplicaListView
from llmgw.serving.api.whatif import SweepView, WhatIfView


class OptionalSlashRouter(SimpleRouter):  # type: ignore[misc]  # DRF ships no types
    """/api/v1/nodes and /api/v1/nodes/ both work: a CLI user types either,
    and a redirect would turn a POST into a GET."""

    def __init__(self) -> None:
        super().__init__()
        self.trailing_slash = "/?"


router = OptionalSlashRouter()
router.register("nodes", NodeViewSet, basename="node")
router.register("models", ModelViewSet, basename="model")
router.register("keys", ApiKeyViewSet, basename="apikey")
urlpatterns = [
    path("nvlink", NvlinkView.as_view(), name="nvlink"),
    path("fabrics", FabricListView.as_view(), name="fabrics"),
    path("fabrics/test", FabricTestView.as_view(), name="fabric-test"),
    path("fabrics/ports", PortListView.as_view(), name="fabric-ports"),
    path("fabrics/<int:pk>/topology", TopologyView.as_view(), name="fabric-topology"),
    path("facility", FacilityView.as_view(), name="facility"),
    path("facility/holds", HoldView.as_view(), name="facility-holds"),
    path("facility/holds/<str:domain>", ReleaseView.as_view(), name="facility-release"),
    path("replicas", ReplicaListView.as_view(), name="replicas"),
    path("whatif", WhatIfView.as_view(), name="whatif"),
    path("whatif/sweep", SweepView.as_view(), name="whatif-sweep"),
    *router.urls,
]
