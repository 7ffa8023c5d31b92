from django.urls import path
from rest_framework.routers import SimpleRouter

from llmgw.inventory.api import agent_views
from llmgw.catalog.api.views import ModelViewSet
from llmgw.inventory.api.views import NodeViewSet



class OptionalSlashRouter(SimpleRouter):
    """/api/v1/nodes and /api/v1/nodes/ both work: a CLI user types either,
    and a redirect would turn a POST into a GET."""

    def __init__(self) -> None:
        super().__init__()
        self.trailing_slash = "/?"


router = OptionalSlashRouter()
router.register("nodes", NodeViewSet, basename="node")
router.register("models", ModelViewSet, basename="model")

agent_urlpatterns = [
    path("join", agent_views.JoinView.as_view(), name="agent-join"),
    path("register", agent_views.RegisterView.as_view(), name="agent-register"),
    path("heartbeat", agent_views.HeartbeatView.as_view(), name="agent-heartbeat"),
]
urlpatterns = router.urls
