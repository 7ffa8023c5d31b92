"""The security headers Django's middleware adds to a response, for the
answers given before Django (heartbeat_asgi).

They are made by Django's own middleware from Django's settings
(SecurityMiddleware's SECURE_*, XFrameOptionsMiddleware's X_FRAME_OPTIONS),
run once on an empty response and kept, so a setting changed, or a
header Django adds in a later version, reaches both paths alike. Whether
the request came over HTTPS matters (Strict-Transport-Security), so there
is one set for each.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

# The middleware whose headers a response before Django must carry too;
# each is run only when settings.MIDDLEWARE lists it.
ADDING_HEADERS = (
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)
# What the ASGI answer sets itself: left to it, whatever the middleware says.
_OWN = {"content-type", "content-length"}

_made: dict[bool, list[tuple[bytes, bytes]]] = {}


class _Request(HttpRequest):  # type: ignore[misc]  # Django ships no types
    def __init__(self, secure: bool) -> None:
        super().__init__()
        self._secure = secure

    def is_secure(self) -> bool:
        return self._secure


def _make(secure: bool) -> list[tuple[bytes, bytes]]:
    response = HttpResponse()
    request = _Request(secure)
    for path in settings.MIDDLEWARE:
        if path in ADDING_HEADERS:
            # Only process_response is called: the view it wraps never runs.
            middleware = import_string(path)(HttpResponse)
            response = middleware.process_response(request, response)
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in response.items()
        if name.lower() not in _OWN
    ]


def _secure(scope: dict[str, Any]) -> bool:
    """As HttpRequest.is_secure() decides it for an ASGI request."""
    if settings.SECURE_PROXY_SSL_HEADER:
        name, expected = settings.SECURE_PROXY_SSL_HEADER
        wanted = name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        for key, value in scope.get("headers") or ():
            if key == wanted:
                return bool(value.decode("latin-1").split(",")[0].strip() == expected)
    return bool(scope.get("scheme") == "https")


def headers(scope: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """The security headers of Django's answer to this request."""
    secure = _secure(scope)
    made = _made.get(secure)
    if made is None:
        made = _made[secure] = _make(secure)
    return made


def _forget(**kwargs: Any) -> None:
    _made.clear()


setting_changed.connect(_forget)
