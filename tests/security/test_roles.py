"""Roles: viewer, operator, admin, and prometheus for /metrics.

Every path and method in the OpenAPI schema is called with a token of each
role and compared with TABLE, who may do what; a path the schema gains
without a row here fails the test. A 404 or a 400 counts as let through
(the body or the object is wrong, the role was not): only 401 and 403 are
refusals.
"""

from __future__ import annotations

import importlib
import io
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from llmgw.accounts import roles
from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.inventory.models import Node
from llmgw.serving import keys
from llmgw.serving.models import ApiKey
from tests.tokens import make_token

pytestmark = pytest.mark.django_db

VW, OP, AD, PR = roles.VIEWER, roles.OPERATOR, roles.ADMIN, roles.PROMETHEUS
NONE = "no role"
PERSONAS = (VW, OP, AD, PR, NONE)
READ = frozenset({VW, OP, AD})
OPERATE = frozenset({OP, AD})
ADMIN = frozenset({AD})
NOBODY: frozenset[str] = frozenset()  # a node's credential, never a user's token
EVERYONE = frozenset(PERSONAS)  # the request carries its own secret

TABLE: dict[tuple[str, str], frozenset[str]] = {
    ("POST", "/api/agent/v1/join"): EVERYONE,
    ("POST", "/api/agent/v1/register"): NOBODY,
    ("POST", "/api/agent/v1/heartbeat"): NOBODY,
    ("GET", "/api/agent/v1/record"): NOBODY,
    ("POST", "/api/agent/v1/certificate"): NOBODY,
    ("POST", "/api/v1/token"): EVERYONE,
    ("GET", "/api/v1/nodes/"): READ,
    ("GET", "/api/v1/nodes/{name}/"): READ,
    ("GET", "/api/v1/nodes/summary/"): READ,
    ("POST", "/api/v1/nodes/{name}/cordon/"): OPERATE,
    ("POST", "/api/v1/nodes/{name}/uncordon/"): OPERATE,
    ("POST", "/api/v1/nodes/{name}/labels/"): OPERATE,
    ("GET", "/api/v1/models/"): READ,
    ("GET", "/api/v1/models/{name}/"): READ,
    ("PATCH", "/api/v1/models/{name}/"): OPERATE,
    ("GET", "/api/v1/models/{name}/explain/"): READ,
    ("GET", "/api/v1/models/{name}/headroom/"): READ,
    ("POST", "/api/v1/models/{name}/place/"): OPERATE,
    ("POST", "/api/v1/models/{name}/resources/"): ADMIN,
    ("GET", "/api/v1/fabrics"): READ,
    ("GET", "/api/v1/fabrics/{id}/topology"): READ,
    ("POST", "/api/v1/fabrics/test"): OPERATE,
    ("GET", "/api/v1/fabrics/ports"): READ,
    ("GET", "/api/v1/replicas"): READ,
    ("GET", "/api/v1/nvlink"): READ,
    # Dry runs on a copy of the fleet, the POST included (it stores nothing).
    ("GET", "/api/v1/whatif"): READ,
    ("POST", "/api/v1/whatif"): READ,
    ("GET", "/api/v1/whatif/sweep"): READ,
    ("GET", "/api/v1/facility"): READ,
    ("POST", "/api/v1/facility/holds"): OPERATE,
    ("DELETE", "/api/v1/facility/holds/{domain}"): OPERATE,
    ("GET", "/api/v1/keys/"): READ,
    ("POST", "/api/v1/keys/"): OPERATE,
    ("GET", "/api/v1/keys/{id}/"): READ,
    # A key's limits: an operator's own keys, an admin's any.
    ("PATCH", "/api/v1/keys/{id}/"): OPERATE,
    ("POST", "/api/v1/keys/{id}/revoke/"): OPERATE,
}

# Beside the schema: /metrics, the schema itself, the console (session).
METRICS = frozenset({VW, OP, AD, PR})
CONSOLE_PAGES = [
    "/",
    "/nodes/node-a",
    "/held",
    "/gpus",
    "/facility",
    "/admin/fabrics",
    "/admin/nvlink",
]
CONSOLE_DATA = ["/console/api/nodes/node-a", "/console/api/gpus", "/console/api/ports"]


def schema_operations() -> set[tuple[str, str]]:
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    return {
        (method.upper(), path)
        for path, item in paths.items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }


def user_with(role: str) -> User:
    user = User.objects.create_user(f"u-{role.replace(' ', '-')}", password="a-long-password")
    if role != NONE:
        roles.grant(user, role)
    return user


def token_of(user: User) -> str:
    return make_token(user)


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    return client


@pytest.fixture
def fleet(make_node: Any) -> dict[str, Any]:
    make_node("node-a")
    catalog.apply_text(
        "models:\n  - name: m\n    source: hf://x/m\n    profiles:\n"
        "      - name: cpu\n        memory_gb: 8\n        cpu_cores: 2\n"
    )
    key = keys.create_key("existing", None, ["m"]).api_key
    return {"name": "node-a", "model": "m", "key": key.pk}


@pytest.fixture
def personas(db: Any) -> dict[str, User]:
    return {role: user_with(role) for role in PERSONAS}


def call(client: APIClient, method: str, path: str, fleet: dict[str, Any], n: int) -> int:
    url = path.replace("{id}", str(fleet["key"] if "/keys/" in path else 1))
    url = url.replace("{name}", fleet["model"] if "/models/" in path else fleet["name"])
    bodies: dict[str, Any] = {
        "/cordon/": {"reason": "role test"},
        "/uncordon/": {"reason": ""},
        "/labels/": {"labels": {"team": "roles"}},
        "/resources/": {"memory_gb": 4},
        "/api/v1/keys/": {"name": f"k{n}", "models": ["m"]},
        "/api/v1/token": {"username": "nobody", "password": "wrong"},
        # No token: a wrong one is a 403 of its own, which would read as the role's.
        "/join": {"schema": 1, "node": "node-z"},
    }
    body = next((b for suffix, b in bodies.items() if url.endswith(suffix)), {})
    if method == "PATCH":
        body = {"under_load": 0}
    if method == "GET":
        return client.get(url).status_code
    return client.generic(method, url, _json(body), content_type="application/json").status_code


def _json(body: Any) -> str:
    import json

    return json.dumps(body)


def test_every_operation_in_the_schema_has_a_row_and_every_row_an_operation():
    operations = schema_operations()
    assert sorted(operations - TABLE.keys()) == [], "operations with no row in TABLE"
    assert sorted(TABLE.keys() - operations) == [], "rows in TABLE the schema no longer has"


def test_each_role_may_do_what_the_table_says_and_nothing_else(fleet, personas):
    wrong = []
    n = 0
    for (method, path), allowed in sorted(TABLE.items()):
        for role in PERSONAS:
            n += 1
            code = call(client_for(personas[role]), method, path, fleet, n)
            let_through = code not in (401, 403)
            if let_through != (role in allowed):
                wrong.append(f"{method} {path} as {role}: {code}")
        code = call(client_for(None), method, path, fleet, n)
        if (code not in (401, 403)) != (allowed == EVERYONE):
            wrong.append(f"{method} {path} anonymous: {code}")
    assert wrong == []


def test_a_user_token_never_posts_as_a_node(fleet, personas):
    node = Node.objects.get(name="node-a")
    for role in PERSONAS:
        code = call(client_for(personas[role]), "POST", "/api/agent/v1/heartbeat", fleet, 0)
        assert code == 401, role
    assert Node.objects.get(name="node-a").last_heartbeat_at == node.last_heartbeat_at


def test_metrics_are_for_prometheus_and_readers(fleet, personas, client):
    for role in PERSONAS:
        token = token_of(personas[role])
        code = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code
        assert code == (200 if role in METRICS else 403), role
    assert client.get("/metrics").status_code == 401


def test_the_schema_and_swagger_ui_are_for_readers(personas):
    for role in PERSONAS:
        client = client_for(personas[role])
        for path in ("/api/schema/", "/api/docs/"):
            code = client.get(path).status_code
            assert code == (200 if role in READ else 403), (path, role)


def test_console_pages_and_their_json_need_the_viewer_role(fleet, personas, client):
    for role in PERSONAS:
        client.force_login(personas[role])
        for path in CONSOLE_PAGES + CONSOLE_DATA:
            code = client.get(path).status_code
            assert code == (200 if role in READ else 403), (path, role)
        client.logout()


@pytest.mark.django_db(transaction=True)
def test_the_console_socket_needs_the_viewer_role(personas):
    # Transactional: the consumer reads the groups through
    # database_sync_to_async, which closes connections a test transaction holds.
    from llmgw.console.consumers import ConsoleConsumer

    async def connect(user: User) -> Any:
        # asgiref's communicator: channels.testing needs daphne for its live server.
        scope = {"type": "websocket", "path": "/ws/console", "headers": [], "user": user}
        socket = ApplicationCommunicator(ConsoleConsumer.as_asgi(), scope)
        await socket.send_input({"type": "websocket.connect"})
        answer = await socket.receive_output(timeout=5)
        await socket.send_input({"type": "websocket.disconnect", "code": 1000})
        await socket.wait(timeout=5)
        return True if answer["type"] == "websocket.accept" else answer.get("code")

    for role in PERSONAS:
        assert async_to_sync(connect)(personas[role]) == (True if role in READ else 4403), role


def test_a_logged_in_user_without_a_role_changes_nothing(fleet, personas, client):
    """Each of these was allowed to any logged-in user before roles."""
    api = client_for(personas[NONE])
    refused = [
        api.post("/api/v1/nodes/node-a/cordon", {"reason": "x"}, format="json"),
        api.post("/api/v1/nodes/node-a/labels", {"labels": {"a": "b"}}, format="json"),
        api.patch("/api/v1/models/m", {"always_running": 3}, format="json"),
        api.post("/api/v1/models/m/place"),
        api.post("/api/v1/models/m/resources", {"memory_gb": 1}, format="json"),
        api.post("/api/v1/keys", {"name": "all", "all_models": True}, format="json"),
        api.get("/api/v1/nodes"),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    token = token_of(personas[NONE])
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 403
    node = Node.objects.get(name="node-a")
    assert (node.cordoned, node.operator_labels) == (False, {})
    model = Model.objects.get(name="m")
    assert (model.always_running, model.replicas.count()) == (0, 0)
    assert model.profiles.get().memory_gb == 8
    assert list(ApiKey.objects.values_list("name", flat=True)) == ["existing"]


def test_an_operator_makes_keys_for_themselves_for_named_models_only(fleet, personas):
    api = client_for(personas[OP])
    everything = api.post("/api/v1/keys", {"name": "all", "all_models": True}, format="json")
    assert everything.status_code == 403 and "admin" in everything.json()["detail"]
    named = api.post("/api/v1/keys", {"name": "mine", "models": ["m"]}, format="json")
    assert named.status_code == 201 and named.json()["owner"] == personas[OP].username
    # Their own keys only: the admin's key is not theirs to see, limit or revoke.
    assert [k["name"] for k in api.get("/api/v1/keys").json()] == ["mine"]
    assert api.post(f"/api/v1/keys/{fleet['key']}/revoke").status_code == 404
    lift = {"requests_per_minute": None}
    assert api.patch(f"/api/v1/keys/{fleet['key']}", lift, format="json").status_code == 404
    assert ApiKey.objects.get(pk=fleet["key"]).revoked_at is None


def test_an_admin_makes_all_model_keys_and_sees_and_revokes_all(fleet, personas):
    keys.create_key("ops-key", personas[OP], ["m"])
    api = client_for(personas[AD])
    everything = api.post("/api/v1/keys", {"name": "all", "all_models": True}, format="json")
    assert everything.status_code == 201 and everything.json()["all_models"] is True
    listed = sorted(k["name"] for k in api.get("/api/v1/keys").json())
    assert listed == ["all", "existing", "ops-key"]
    assert api.post("/api/v1/keys/ops-key/revoke").status_code == 200


def test_a_superuser_is_an_admin_and_a_staff_flag_is_no_role(db):
    root = User.objects.create_superuser("root", password="a-long-password")
    staff = User.objects.create_user("staff", password="a-long-password", is_staff=True)
    assert roles.is_admin(root) and not roles.is_viewer(staff)
    staff.is_active = False
    roles.grant(staff, AD)
    assert not roles.is_viewer(staff)


def test_the_role_groups_are_made_by_migrate(db):
    # Run the data migration's own function: a transactional test earlier
    # in the session may have flushed the rows migrate made.
    from django.apps import apps
    from django.db.migrations.loader import MigrationLoader

    assert ("accounts", "0001_roles") in MigrationLoader(None).graph.nodes
    migration = importlib.import_module("llmgw.accounts.migrations.0001_roles")
    Group.objects.all().delete()
    migration.create(apps, None)
    assert set(Group.objects.values_list("name", flat=True)) == {VW, OP, AD, PR}


def test_grant_role_gives_exactly_one_role(db):
    user = user_with(VW)
    out = io.StringIO()
    call_command("grant_role", user.username, OP, stdout=out)
    assert "now has role operator" in out.getvalue()
    assert sorted(user.groups.values_list("name", flat=True)) == [OP]
    call_command("grant_role", user.username, "none", stdout=out)
    assert not user.groups.exists()
    call_command("grant_role", "prometheus", PR, "--create", stdout=out)
    scraper = User.objects.get(username="prometheus")
    assert roles.may_scrape(scraper) and not roles.is_viewer(scraper)
    assert not scraper.has_usable_password()


def test_bootstrap_admin_makes_an_admin(db, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGW_ADMIN_PASSWORD", "a-long-admin-password")
    call_command(
        "bootstrap_admin", "--cli-config", str(tmp_path / "cli.yaml"), stdout=io.StringIO()
    )
    admin = User.objects.get(username="admin")
    assert roles.is_admin(admin)
    assert list(admin.groups.values_list("name", flat=True)) == [AD]


def test_bootstrap_admin_run_again_says_how_to_log_in(db, tmp_path, monkeypatch):
    """make demo run a second time: the password is not shown again (it is
    stored hashed), so the line says how to get in."""
    monkeypatch.setenv("LLMGW_ADMIN_PASSWORD", "a-long-admin-password")
    cli = str(tmp_path / "cli.yaml")
    call_command("bootstrap_admin", "--cli-config", cli, stdout=io.StringIO())
    out = io.StringIO()
    call_command("bootstrap_admin", "--cli-config", cli, stdout=out)
    assert "log in with LLMGW_ADMIN_PASSWORD" in out.getvalue()
    monkeypatch.setenv("LLMGW_ADMIN_PASSWORD", "not-what-it-was-made-with")
    out = io.StringIO()
    call_command("bootstrap_admin", "--cli-config", cli, stdout=out)
    first = out.getvalue().splitlines()[0]
    assert first == (
        "admin account 'admin' already exists: its password was shown once, when it was "
        "made; to set a new one: python manage.py changepassword admin"
    )
