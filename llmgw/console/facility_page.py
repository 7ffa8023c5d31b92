"""The facility page: a shell its script fills from /api/v1/facility (what
`llmgw ctl facility` prints) and the what-if sweep's API."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from llmgw.accounts import roles
from llmgw.accounts.decorators import viewer_required
from llmgw.locations import LEVELS
from llmgw.placement.whatif import SWEPT


@viewer_required
def facility(request: HttpRequest) -> HttpResponse:
    context = {
        "page": "facility",
        # Hold and release are in the page only for a role that may use
        # them: a viewer is sent no control that could only answer 403.
        "can_operate": roles.is_operator(request.user),
        "levels": LEVELS,
        "swept": SWEPT,
    }
    return render(request, "facility.html", context)
