"""/api/v1/: one router for every app's operator API."""

from rest_framework.routers import SimpleRouter

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
urlpatterns = router.urls
