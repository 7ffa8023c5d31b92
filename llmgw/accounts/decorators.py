"""The roles for plain Django views (the console's pages and JSON)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from llmgw.accounts import roles


def viewer_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """An anonymous visitor is sent to log in; a logged-in user without a
    role gets 403, not the login page again (logging in would not help)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not roles.is_viewer(request.user):
            raise PermissionDenied("needs the viewer role (or operator, admin)")
        return view(request, *args, **kwargs)

    checked: Callable[..., HttpResponse] = login_required(wrapped)
    return checked
