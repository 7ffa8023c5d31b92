from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.exceptions import AuthenticationFailed

from llmgw.accounts import roles
from llmgw.accounts.authentication import TokenAuthentication
from llmgw.metrics import scrape


class _BearerOrToken(TokenAuthentication):
    # Prometheus sends "Bearer" by default; the API's token scheme is "Token".
    def authenticate(self, request: HttpRequest) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header.startswith("Bearer "):
            request.META["HTTP_AUTHORIZATION"] = "Token " + header[len("Bearer ") :]
        return super().authenticate(request)


def _text(message: str, status: int) -> HttpResponse:
    return HttpResponse(message + "\n", status=status, content_type="text/plain")


def _scraper(request: HttpRequest) -> HttpResponse | None:
    """None for a logged-in user or an API token with the prometheus role,
    or any role that may read the console; else the refusal."""
    user = request.user
    if not user.is_authenticated:
        try:
            found = _BearerOrToken().authenticate(request)
        except AuthenticationFailed:
            return _text("invalid token", 401)
        if found is None:
            return _text("authentication required", 401)
        user = found[0]
    if not roles.may_scrape(user):
        return _text("needs the prometheus role (or viewer, operator, admin)", 403)
    return None


def _answer(request: HttpRequest, text: Callable[[], str]) -> HttpResponse:
    refused = _scraper(request)
    if refused is not None:
        return refused
    return HttpResponse(text(), content_type=CONTENT_TYPE_LATEST)


def metrics(request: HttpRequest) -> HttpResponse:
    """The whole fleet in Prometheus format: its nodes' series and its own."""
    return _answer(request, scrape.whole_text)


def fleet(request: HttpRequest) -> HttpResponse:
    """The fleet-level series only: fabrics, held models, the gateway."""
    return _answer(request, scrape.fleet_text)


def nodes(request: HttpRequest) -> HttpResponse:
    """The per-node series of one shard (?shard=i&of=N), or of every node."""
    refused = _scraper(request)
    if refused is not None:
        return refused
    try:
        shard = scrape.shard_of(request.GET)
    except scrape.BadShard as exc:
        return _text(str(exc), 400)
    return HttpResponse(scrape.node_text(shard), content_type=CONTENT_TYPE_LATEST)
