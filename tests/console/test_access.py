"""Every console page and its JSON are behind login, and none shows a secret."""

from __future__ import annotations

import pytest

from llmgw.inventory import services

PAGES = ["/", "/nodes/node-a", "/held", "/gpus", "/facility", "/admin/fabrics", "/admin/nvlink"]
DATA = ["/console/api/nodes/node-a", "/console/api/gpus", "/console/api/ports"]


@pytest.mark.django_db
def test_pages_send_an_anonymous_visitor_to_log_in(client, make_node):
    make_node("node-a")
    for path in PAGES:
        r = client.get(path)
        assert r.status_code == 302 and r["Location"].startswith("/login/"), path
    for path in [*DATA, "/console/api/promql?query=up"]:
        assert client.get(path).status_code == 401, path


@pytest.mark.django_db
def test_no_page_shows_a_credential(client, make_node, operator):
    node, credential = make_node("node-a")
    token = services.add_node("node-b", "test")
    client.force_login(operator)
    for path in PAGES + DATA:
        body = client.get(path).content.decode()
        assert credential not in body and token not in body, path
        assert node.credential_hash not in body and "credential_hash" not in body, path


@pytest.mark.django_db
def test_django_admin_still_answers_beside_the_console(client, operator):
    operator.is_staff = operator.is_superuser = True
    operator.save()
    client.force_login(operator)
    assert client.get("/admin/fabrics").status_code == 200
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 200


@pytest.mark.django_db
def test_promql_says_when_prometheus_is_not_configured(client, operator, settings):
    settings.PROMETHEUS_URL = None
    client.force_login(operator)
    assert client.get("/console/api/promql?query=up").json()["configured"] is False
