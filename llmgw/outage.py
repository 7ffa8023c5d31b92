"""While the database cannot be reached, say so: 503 with Retry-After.

A request that could not get a database connection answered 500, which
reads as a bug in llmgw and tells an agent or a script nothing about
when to try again. The agents back off and fail over on a 503; a person
reads that the control plane's database is out, not that llmgw broke.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger("llmgw.outage")

RETRY_AFTER_S = 5


class DatabaseOutageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, (OperationalError, InterfaceError)):
            return None
        log.warning("database unreachable on %s %s: %s", request.method, request.path, exc)
        return JsonResponse(
            {
                "detail": "the control plane's database cannot be reached; retry shortly",
                "retry_after_s": RETRY_AFTER_S,
            },
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
