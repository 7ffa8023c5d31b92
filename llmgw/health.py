"""GET /healthz: this web process answers and reaches its database.

What a load balancer and the rolling upgrade (deploy/rolling-upgrade.sh)
wait on before sending a restarted process work, or restarting the next
one. It needs no login and says nothing but whether the database
answered: a port that accepts connections is not yet a process that can
store a heartbeat.
"""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse

from llmgw.outage import RETRY_AFTER_S


def healthz(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse(
            {"database": "unreachable"},
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return JsonResponse({"database": "ok"})
