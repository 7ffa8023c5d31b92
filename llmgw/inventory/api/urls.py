from django.urls import path
from rest_framework.routers import SimpleRouter

from llmgw.inventory.api import agent_views
from llmgw.inventory.api.views import NodeViewSet

router = SimpleRouter(trailing_slash="/?")
router.register("nodes", NodeViewSet, basename="node")

agent_urlpatterns = [
    path("join", agent_views.JoinView.as_view(), name="agent-join"),
    path("register", agent_views.RegisterView.as_view(), name="agent-register"),
    path("heartbeat", agent_views.HeartbeatView.as_view(), name="agent-heartbeat"),
]
urlpatterns = router.urls
