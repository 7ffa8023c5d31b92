"""GET /healthz answers without a login, and only once the database has
answered: what deploy/rolling-upgrade.sh and a load balancer wait on."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext


@pytest.mark.django_db
def test_healthz_asks_the_database_and_needs_no_login() -> None:
    with CaptureQueriesContext(connection) as queries:
        response = Client().get("/healthz")
    assert response.status_code == 200, response.content
    assert response.json() == {"database": "ok"}
    assert [q["sql"] for q in queries] == ["SELECT 1"]


@pytest.mark.django_db
def test_healthz_changes_nothing() -> None:
    assert Client().post("/healthz").status_code == 405
