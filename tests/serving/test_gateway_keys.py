"""Gateway API keys: the REST API, the CLI and the admin."""

from __future__ import annotations

import hashlib
import time

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from llmgw.accounts import roles
from llmgw.catalog.models import Model
from llmgw.cli import ctl
from llmgw.serving.models import ApiKey
from tests.serving.gateway_peers import gateway_server  # noqa: F401
from tests.tokens import make_token


@pytest.fixture
def models(db):
    for name in ("tiny", "big"):
        Model.objects.create(name=name, source=f"hf://x/{name}")


def test_create_shows_the_key_once_and_stores_only_its_digest(
    api, models, django_assert_num_queries
):
    # The key's usage is one query of its own (none yet, for a new key).
    with django_assert_num_queries(11):
        created = api.post("/api/v1/keys", {"name": "ci", "models": ["tiny"]}, format="json")
    assert created.status_code == 201, created.content
    key = created.json()["key"]
    assert key.startswith("sk-llmgw-") and len(key) > 40
    assert created.json()["prefix"] == key[:14] and created.json()["models"] == ["tiny"]
    row = ApiKey.objects.get()
    assert row.digest == hashlib.sha256(key.encode()).hexdigest()
    assert key not in repr(list(ApiKey.objects.values()))
    assert row.owner.username == "ops"

    with django_assert_num_queries(5):
        listed = api.get("/api/v1/keys").json()
    assert [k["name"] for k in listed] == ["ci"] and "key" not in listed[0]
    assert "digest" not in listed[0]


def test_scope_is_named_models_or_all_never_by_omission(api, operator, models):
    roles.grant(operator, roles.ADMIN)  # an all-model key is an admin's
    refused = api.post("/api/v1/keys", {"name": "x"}, format="json")
    assert refused.status_code == 400 and "name the models" in refused.json()["detail"]
    both = api.post(
        "/api/v1/keys", {"name": "x", "models": ["tiny"], "all_models": True}, format="json"
    )
    assert both.status_code == 400
    unknown = api.post("/api/v1/keys", {"name": "x", "models": ["tiny", "nope"]}, format="json")
    assert unknown.status_code == 400 and unknown.json()["detail"] == "no such model: nope"
    everything = api.post("/api/v1/keys", {"name": "x", "all_models": True}, format="json")
    assert everything.status_code == 201 and everything.json()["all_models"] is True
    again = api.post("/api/v1/keys", {"name": "x", "all_models": True}, format="json")
    assert again.status_code == 400 and "already named" in again.json()["detail"]


def test_revoke_by_name_then_the_name_is_free_again(
    api, operator, models, django_assert_num_queries
):
    roles.grant(operator, roles.ADMIN)
    first = api.post("/api/v1/keys", {"name": "ci", "all_models": True}, format="json").json()
    with django_assert_num_queries(7):
        revoked = api.post("/api/v1/keys/ci/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    # Idempotent, and reachable by id once the name is taken again.
    api.post("/api/v1/keys", {"name": "ci", "all_models": True}, format="json")
    again = api.post(f"/api/v1/keys/{first['id']}/revoke").json()
    assert again["revoked_at"] == revoked.json()["revoked_at"]
    assert api.get("/api/v1/keys/ci").json()["revoked_at"] is None
    assert api.post("/api/v1/keys/nope/revoke").status_code == 404


def test_users_see_their_own_keys_and_admins_see_all(api, models):
    api.post("/api/v1/keys", {"name": "mine", "models": ["tiny"]}, format="json")
    other = User.objects.create_user("other", password="a-long-test-password")
    roles.grant(other, roles.OPERATOR)
    theirs = APIClient()
    theirs.credentials(HTTP_AUTHORIZATION=f"Token {make_token(other)}")
    assert theirs.get("/api/v1/keys").json() == []
    assert theirs.post("/api/v1/keys/mine/revoke").status_code == 404
    # Django's staff flag opens Django admin, not everyone's keys.
    other.is_staff = True
    other.save()
    assert theirs.get("/api/v1/keys").json() == []
    roles.grant(other, roles.ADMIN)
    assert [k["name"] for k in theirs.get("/api/v1/keys").json()] == ["mine"]
    assert APIClient().get("/api/v1/keys").status_code == 401


def test_cli_creates_lists_and_revokes_against_a_real_server(
    asgi_server, operator, monkeypatch, capsys
):
    Model.objects.create(name="tiny", source="hf://x/tiny")
    Model.objects.create(name="big", source="hf://x/big")
    monkeypatch.setenv("LLMGW_URL", asgi_server)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))

    assert ctl.main(["keys", "create", "ci", "--models", "tiny,big"]) == 0
    out = capsys.readouterr().out
    key = out.strip().splitlines()[-1]
    assert key.startswith("sk-llmgw-") and "big,tiny" in out
    assert ApiKey.objects.get().digest == hashlib.sha256(key.encode()).hexdigest()

    assert ctl.main(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert "ci" in listing and "active" in listing and key not in listing

    assert ctl.main(["keys", "revoke", "ci"]) == 0
    assert "revoked" in capsys.readouterr().out
    assert ApiKey.objects.get().revoked_at is not None
    assert ctl.main(["keys", "create", "bad", "--models", "nope"]) == 1
    assert "no such model: nope" in capsys.readouterr().err


def test_admin_lists_and_revokes_but_never_makes_keys(client, models):
    from llmgw.serving import keys

    User.objects.create_superuser("root", password="a-long-test-password")
    client.login(username="root", password="a-long-test-password")
    created = keys.create_key("ci", None, ["tiny"])
    assert client.get("/admin/serving/apikey/").status_code == 200
    assert client.get("/admin/serving/apikey/add/").status_code == 403
    answer = client.post(
        "/admin/serving/apikey/",
        {"action": "revoke", "_selected_action": [created.api_key.pk]},
    )
    assert answer.status_code == 302
    created.api_key.refresh_from_db()
    assert created.api_key.revoked_at is not None


def test_a_new_key_is_accepted_at_once_and_a_revoked_one_refused_within_2_s(
    asgi_server, operator, monkeypatch, capsys
):
    """Through the real server, with the gateway's own refresh loops: the
    key `keys create` prints works on the very next request."""
    Model.objects.create(name="tiny", source="hf://x/tiny")
    monkeypatch.setenv("LLMGW_URL", asgi_server)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    # The gateway loads its table now, before any of these keys exist.
    assert httpx.get(asgi_server + "/v1/models").status_code == 401

    def models(key: str) -> httpx.Response:
        return httpx.get(asgi_server + "/v1/models", headers={"authorization": f"Bearer {key}"})

    made = []
    for i in range(3):
        assert ctl.main(["keys", "create", f"ci-{i}", "--models", "tiny"]) == 0
        key = capsys.readouterr().out.strip().splitlines()[-1]
        answer = models(key)
        assert answer.status_code == 200, f"key {i}: {answer.status_code} {answer.text}"
        assert [m["id"] for m in answer.json()["data"]] == ["tiny"]
        made.append(key)

    assert ctl.main(["keys", "revoke", "ci-0"]) == 0
    revoked = time.monotonic()
    while models(made[0]).status_code == 200:
        assert time.monotonic() - revoked < 2.0, "a revoked key still accepted after 2 s"
        time.sleep(0.05)
    assert models(made[0]).status_code == 401
    assert models(made[1]).status_code == 200


def test_a_stranger_key_costs_one_lookup_however_often_it_is_sent(gateway_server):  # noqa: F811
    """A key that is not in the table is looked up in the database once:
    keys are 256 random bits made here, so one absent now never appears."""
    Model.objects.create(name="tiny", source="hf://x/tiny")
    gateway_server.refresh()
    for _ in range(5):
        answer = httpx.get(
            gateway_server.url + "/v1/models", headers={"authorization": "Bearer sk-llmgw-nope"}
        )
        assert answer.status_code == 401
    assert gateway_server.gateway.keys.lookups == 1
