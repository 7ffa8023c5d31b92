from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from rest_framework.exceptions import AuthenticationFailed

from llmgw.accounts import roles
from llmgw.accounts.authentication import TokenAuthentication
from llmgw.metrics.agents import AgentCollector
from llmgw.metrics.collectors import FleetCollector
from llmgw.metrics.fabrics import FabricCollector
from llmgw.metrics.gpus import GpuCollector
from llmgw.metrics.held import HeldCollector
from llmgw.metrics.shards import ShardCollector
from llmgw.serving.gateway.metrics import GatewayCollector

_registry = CollectorRegistry(auto_describe=False)
_registry.register(FleetCollector())
_registry.register(AgentCollector())
_registry.register(GpuCollector())
_registry.register(FabricCollector())
_registry.register(ShardCollector())
_registry.register(HeldCollector())
_registry.register(GatewayCollector())


class _BearerOrToken(TokenAuthentication):
    # Prometheus sends "Bearer" by default; the API's token scheme is "Token".
    def authenticate(self, request):  # type: ignore[no-untyped-def]
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header.startswith("Bearer "):
            request.META["HTTP_AUTHORIZATION"] = "Token " + header[len("Bearer ") :]
        return super().authenticate(request)


def metrics(request: HttpRequest) -> HttpResponse:
    """The fleet in Prometheus format, for a logged-in user or an API token
    with the prometheus role, or any role that may read the console."""
    user = request.user
    if not user.is_authenticated:
        try:
            found = _BearerOrToken().authenticate(request)
        except AuthenticationFailed:
            return HttpResponse("invalid token\n", status=401, content_type="text/plain")
        if found is None:
            return HttpResponse("authentication required\n", status=401, content_type="text/plain")
        user = found[0]
    if not roles.may_scrape(user):
        return HttpResponse(
            "needs the prometheus role (or viewer, operator, admin)\n",
            status=403,
            content_type="text/plain",
        )
    return HttpResponse(generate_latest(_registry), content_type=CONTENT_TYPE_LATEST)
