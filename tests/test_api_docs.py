"""/api/docs/ works on a site with no way out: Swagger UI's scripts, styles
and icon are served by the control plane itself, never by a public CDN."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import httpx

from tests.tokens import make_token


def test_api_docs_loads_nothing_from_another_host(asgi_server, operator):
    headers = {"Authorization": f"Token {make_token(operator)}"}
    page = httpx.get(asgi_server + "/api/docs/", headers=headers)
    assert page.status_code == 200, page.text
    html = page.text
    assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    # The page's own script names the bundle and the preset it loads.
    assets += re.findall(r"""["']([^"']+\.(?:js|css|png))["']""", html)
    assert any("swagger-ui" in a and a.endswith(".js") for a in assets), html
    elsewhere = [
        a
        for a in assets
        if urlsplit(urljoin(asgi_server + "/", a)).netloc != urlsplit(asgi_server).netloc
    ]
    assert elsewhere == [], f"/api/docs/ reaches outside the site: {elsewhere}"
    assert "cdn" not in html.lower()
    for asset in sorted(set(assets)):
        answer = httpx.get(urljoin(asgi_server + "/api/docs/", asset), headers=headers)
        assert answer.status_code == 200, f"{asset}: {answer.status_code}"
