# ruff: noqa: F811 (gateway_server, imported from gateway_peers, is a parameter here)
"""Validation at the edge: what a node or a user sends is refused whole,
with the field named, before anything of it is stored, and never answers
500; nor can it make a page answer 500 later. Each test is named after the
finding it proves fixed; all run on PostgreSQL, which is what refuses NUL
and surrogates in text and jsonb."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from llmgw.inventory.models import Gpu, Node
from tests.payloads import heartbeat, registration
from tests.serving.gateway_peers import gateway_server  # noqa: F401

# Over Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) and the agent's 1 MiB.
OVERSIZED = 3 * 1024 * 1024
NUL, SURROGATE = "a\x00b", "\ud800"
PAGES = ["/api/v1/nodes/", "/metrics", "/", "/api/v1/nvlink", "/console/api/nodes/gpu-1"]


def pages_answer(client: Any, operator: Any) -> dict[str, int]:
    client.force_login(operator)
    return {path: client.get(path).status_code for path in PAGES}


@pytest.fixture
def joined(make_node: Any, agent_client: Any) -> Any:
    node, credential = make_node("gpu-1")
    return node, agent_client(credential)


@pytest.mark.parametrize(
    "sample, field",
    [
        # Stored in 32-bit columns by the services after the measurements.
        ({"index": 0, "ecc_uncorrected": 2**40}, "gpus.0"),
        ({"index": 0, "foreign_processes": 2**40}, "gpus.0"),
    ],
)
def test_a_heartbeat_refused_for_one_field_stores_none_of_its_measurements(joined, sample, field):
    node, agent = joined
    gpu = {"index": 0, "uuid": "GPU-1", "name": "H100", "class": "H100"}
    assert agent.post("register", registration("gpu-1", gpus=[gpu])).status_code == 200
    answer = agent.post("heartbeat", heartbeat("gpu-1", gpus=[sample]))
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]
    node.refresh_from_db()
    assert node.last_heartbeat_at is None and node.cpu_utilization_percent is None
    assert Gpu.objects.get(node=node).ecc_uncorrected is None


@pytest.mark.parametrize(
    "port, field",
    [
        ({"device": "mlx5_" + "0" * 80, "port": 1}, "ports.0.device"),
        ({"device": "mlx5_0", "port": 1, "rate_text": "4X NDR" * 10}, "ports.0.rate_text"),
        ({"device": "mlx5_0", "port": 1, "node_guid": "0x" + "a" * 40}, "ports.0.node_guid"),
        (
            {"device": "mlx5_0", "port": 1, "sm": {"guid": "0x01", "lid": 2**40}},
            "ports.0.sm.lid",
        ),
        (
            {"device": "mlx5_0", "port": 1, "sm": {"guid": "0x01", "state": "MASTER" * 5}},
            "ports.0.sm.state",
        ),
    ],
)
def test_port_fields_are_bounded_by_their_columns(joined, port, field):
    node, agent = joined
    assert agent.post("register", registration("gpu-1")).status_code == 200
    answer = agent.post("heartbeat", heartbeat("gpu-1", ports=[port]))
    assert answer.status_code == 400, answer.content
    assert any(key.startswith("ports.0") for key in answer.json()["errors"]), answer.json()
    assert field.rsplit(".", 1)[1] in json.dumps(answer.json()["errors"])
    node.refresh_from_db()
    assert node.last_heartbeat_at is None


def test_an_xid_code_that_is_a_unicode_digit_cannot_break_metrics(joined, client, operator):
    node, agent = joined
    assert agent.post("register", registration("gpu-1")).status_code == 200
    # "²".isdigit() is True and int("²") raises: /metrics once answered 500.
    answer = agent.post("heartbeat", heartbeat("gpu-1", gpus=[{"index": 0, "xids": {"²": 1}}]))
    assert answer.status_code == 400, answer.content
    assert "gpus.0" in answer.json()["errors"]
    assert set(pages_answer(client, operator).values()) == {200}


def test_a_chunked_body_over_the_limit_answers_413_in_json(asgi_server):
    def chunks() -> Any:
        # No Content-Length: nothing tells Django the size before it reads,
        # and it spooled the whole body to disk before any check ran.
        yield b'{"name": "'
        for _ in range(OVERSIZED // 65536):
            yield b"x" * 65536
        yield b'"}'

    # Before authentication too: a stranger's body is not kept either.
    for path in ("/api/v1/keys", "/api/agent/v1/heartbeat"):
        answer = httpx.post(
            asgi_server + path, content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 413, (path, answer.text)
        assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["errors"]["payload"]


def test_a_unicode_digit_in_a_key_path_is_not_found(api):
    # "²".isdigit() is True; int("²") raised and answered 500.
    # A number too long for int() (4,300 digits) or for the id column too.
    for path in (
        "/api/v1/keys/%C2%B2/",
        "/api/v1/keys/%C2%B2/revoke",
        f"/api/v1/keys/{'1' * 5000}/",
        f"/api/v1/keys/{2**63}/",
    ):
        answer = api.get(path) if path.endswith("/") else api.post(path)
        assert answer.status_code == 404, (path, answer.status_code)


def test_a_nul_in_a_path_or_query_is_a_400_naming_where(api, client):
    # PostgreSQL refuses NUL in a statement: a lookup by name answered 500.
    for path in ("/api/v1/models/a%00b/", "/api/v1/nodes/a%00b/", "/api/v1/fabrics/a%00b/"):
        answer = api.get(path)
        assert answer.status_code == 400, (path, answer.status_code)
        assert answer.json()["detail"].startswith("path: contains a NUL character")
    answer = api.get("/api/v1/replicas", {"node": "a\x00b"})
    assert answer.status_code == 400 and answer.json()["detail"].startswith("node: contains a NUL")
    answer = api.get("/api/v1/nodes/", {"a\x00": "x"})
    assert answer.status_code == 400 and answer.json()["detail"].startswith("a\\x00: contains")
    agent = client.get("/api/agent/v1/record", {"node": "a\x00b"})
    assert agent.status_code == 400 and agent.json()["errors"]["node"][0].startswith(
        "contains a NUL"
    )


CATALOG = """
models:
  - name: tiny
    source: hf://x/tiny
    profiles:
      - name: cpu
        memory_gb: 2
        cpu_cores: 2
"""


@pytest.fixture
def tiny(db: Any, operator: Any) -> Any:
    """The catalog's one model, and `api` made an admin: resources are theirs."""
    from llmgw.catalog import services as catalog

    catalog.apply_text(CATALOG)
    operator.is_superuser = True
    operator.save()


def test_memory_gb_1e308_is_refused_and_the_models_pages_stay_up(tiny, api):
    # 1e308 GiB is finite, but not once it is multiplied into bytes.
    answer = api.post("/api/v1/models/tiny/resources", {"memory_gb": 1e308}, format="json")
    assert answer.status_code == 400, answer.content
    assert "memory_gb" in answer.json()
    for path in ("", "headroom/", "explain/"):
        assert api.get(f"/api/v1/models/tiny/{path}").status_code == 200, path
    assert api.post("/api/v1/models/tiny/place").status_code in (201, 409)
    assert api.get("/api/v1/models/").status_code == 200


@pytest.mark.parametrize(
    "path, body",
    [
        ("resources", {"cpu_cores": 2**63}),
        ("resources", {"cpu_cores": 2**31}),
        ("resources", {"memory_gb": -1}),
        ("", {"under_load": 2**63}),
        ("", {"always_running": 2**31}),
    ],
)
def test_numbers_past_their_columns_and_sane_limits_are_refused(tiny, api, path, body):
    if path:
        answer = api.post(f"/api/v1/models/tiny/{path}", body, format="json")
    else:
        answer = api.patch("/api/v1/models/tiny", body, format="json")
    assert answer.status_code == 400, answer.content
    assert set(answer.json()) == set(body)
    assert api.get("/api/v1/models/tiny/").status_code == 200


@pytest.mark.parametrize(
    "resources, key",
    [
        ("memory_gb: .inf", "memory_gb"),
        ("memory_gb: .nan", "memory_gb"),
        # YAML 1.1 reads a float only with a dot and a signed exponent.
        ("memory_gb: 1.0e+400", "memory_gb"),
        ("memory_gb: 1.0e+308", "memory_gb"),
        ("memory_gb: 2\n        cpu_cores: 9223372036854775808", "cpu_cores"),
        (
            "memory_gb: 2\n        gpu_class: H100\n        gpus_per_shard: 99999999999",
            "gpus_per_shard",
        ),
        ("memory_gb: 2\n        priority: 2147483648", "priority"),
        ('memory_gb: 2\n        fabric: "ib\\0a"', "fabric"),
        ('memory_gb: 2\n        fabric: "ib\\ud800"', "fabric"),
        ('memory_gb: 2\n        node_selector: {"rack\\0": r1}', "node_selector"),
    ],
)
def test_a_catalog_number_or_string_out_of_bounds_is_refused_naming_line_and_key(
    db, resources, key
):
    from llmgw.catalog import services as catalog
    from llmgw.catalog.loader import CatalogError

    source = CATALOG.replace("memory_gb: 2\n        cpu_cores: 2", resources)
    with pytest.raises(CatalogError) as refused:
        catalog.apply_text(source)
    assert len(refused.value.errors) == 1, refused.value.errors
    assert refused.value.errors[0].startswith("line "), refused.value.errors
    assert f"models[0].profiles[0].{key}: " in refused.value.errors[0]


def test_a_catalog_of_yaml_aliases_is_refused_at_once(db):
    from llmgw.catalog.loader import CatalogError, parse

    # A kilobyte that fans out to 14,400 profiles: seconds per kilobyte,
    # growing with the square of its size.
    n = 120
    text = (
        "p: &p {name: cpu, memory_gb: 2, cpu_cores: 2}\n"
        f"m: &m {{name: tiny, source: hf://x, profiles: [{', '.join(['*p'] * n)}]}}\n"
        f"models: [{', '.join(['*m'] * n)}]\n"
    )
    started = time.monotonic()
    with pytest.raises(CatalogError) as refused:
        parse(text)
    assert time.monotonic() - started < 1
    assert refused.value.errors[0].startswith("line 1: ") and "alias" in str(refused.value)
    with pytest.raises(CatalogError) as deep:
        parse("models: " + "[" * 100_000 + "]" * 100_000)
    assert "nested deeper than 64" in str(deep.value)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_a_lone_surrogate_in_a_label_key_cannot_take_the_fleets_pages_down(
    joined, client, operator
):
    node, agent = joined
    answer = agent.post("register", registration("gpu-1", labels={SURROGATE + "rack": "r1"}))
    assert answer.status_code == 400, answer.content
    assert "lone surrogate" in answer.json()["errors"]["labels"][0]
    assert set(pages_answer(client, operator).values()) == {200}
    node.refresh_from_db()
    assert node.registered_at is None


# (endpoint, what to send, the field the refusal must name); each with a NUL
# and with a lone surrogate where the text goes.
SHAPES = [
    ("register", lambda bad: {"labels": {bad: "x"}}, "labels"),
    ("register", lambda bad: {"gpus": [{"index": 0, "uuid": bad}]}, "gpus.0.uuid"),
    ("register", lambda bad: {"gpus": [{"index": 0, "name": bad}]}, "gpus.0.name"),
    (
        "register",
        lambda bad: {"gpu_topology": {"gpus": [bad], "matrix": [[]]}},
        "gpu_topology.gpus.0",
    ),
    ("register", lambda bad: {"imex": {"up": True, "error": bad}}, "imex.error"),
    ("heartbeat", lambda bad: {"gpus": [{"index": 0, "uuid": bad}]}, "gpus.0.uuid"),
    ("heartbeat", lambda bad: {"imex": {"up": False, "error": bad}}, "imex.error"),
    ("heartbeat", lambda bad: {"sxids": {"0000:85:00.0": {bad: 1}}}, "sxids.0000:85:00.0"),
    ("heartbeat", lambda bad: {"engines": [{"name": bad, "status": "failed"}]}, "engines.0.name"),
    ("heartbeat", lambda bad: {"ports": [{"device": bad, "port": 1}]}, "ports.0.device"),
    (
        "heartbeat",
        lambda bad: {"shards": [{"id": "r1-0", "state": "failed", "message": bad}]},
        "shards.0.message",
    ),
    (
        "heartbeat",
        lambda bad: {"subnet_managers": [{"port": bad, "managers": []}]},
        "subnet_managers.0.port",
    ),
    ("heartbeat", lambda bad: {"unknown_extra": {"x": bad}}, "unknown_extra.x"),
]


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    "shape", SHAPES, ids=[f"{endpoint}-{field}" for endpoint, _, field in SHAPES]
)
def test_nul_and_lone_surrogates_are_refused_with_the_field_named(
    joined, client, operator, shape, bad
):
    node, agent = joined
    endpoint, make, field = shape
    if endpoint == "heartbeat":
        assert agent.post("register", registration("gpu-1")).status_code == 200
    build = registration if endpoint == "register" else heartbeat
    answer = agent.post(endpoint, json.dumps(build("gpu-1", **make(bad))))
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"], answer.json()
    node.refresh_from_db()
    assert node.last_heartbeat_at is None and node.cpu_utilization_percent is None
    assert set(pages_answer(client, operator).values()) == {200}


def test_non_finite_numbers_are_refused_naming_the_field(joined):
    node, agent = joined
    body = json.dumps(
        registration("gpu-1", gpus=[{"index": 0, "temperature_c": float("nan")}], extra=1e999)
    )
    answer = agent.post("register", body)
    assert answer.status_code == 400, answer.content
    errors = answer.json()["errors"]
    assert "gpus.0.temperature_c" in errors and "extra" in errors
    assert "finite" in errors["extra"][0]


def test_nesting_deeper_than_64_levels_is_refused(joined):
    _, agent = joined
    answer = agent.post("register", registration("gpu-1", extra=json.loads(deep(65))))
    assert answer.status_code == 400, answer.content
    assert "nested deeper than 64" in json.dumps(answer.json())
    assert (
        agent.post("register", registration("gpu-1", extra=json.loads(deep(60)))).status_code == 200
    )


def test_100000_nested_brackets_answer_400_on_the_agent_api(joined):
    _, agent = joined
    body = '{"schema": 1, "node": "gpu-1", "x": ' + deep(100_000) + "}"
    # join is unauthenticated; heartbeat tries the fast path first.
    for path in ("join", "register", "heartbeat"):
        answer = agent.post(path, body)
        assert answer.status_code == 400, (path, answer.content)
        assert "nested deeper than 64" in json.dumps(answer.json()), path


def test_100000_nested_brackets_answer_400_on_the_token_endpoint_and_the_rest_api(client, api):
    body = '{"username": ' + deep(100_000) + "}"
    token = client.post("/api/v1/token", body, content_type="application/json")
    assert token.status_code == 400 and token["Content-Type"] == "application/json"
    keys = api.post("/api/v1/keys", body, content_type="application/json")
    assert keys.status_code == 400 and "nested deeper than 64" in keys.content.decode()


def test_the_rest_api_refuses_nul_and_surrogates_in_keys_with_the_field_named(
    joined, api, client, operator
):
    for bad in (NUL, SURROGATE):
        answer = api.post(
            "/api/v1/nodes/gpu-1/labels",
            json.dumps({"labels": {bad: "x"}}),
            content_type="application/json",
        )
        assert answer.status_code == 400, answer.content
        assert "labels" in answer.json()
    assert Node.objects.get(name="gpu-1").operator_labels in ({}, None)
    assert set(pages_answer(client, operator).values()) == {200}


def test_a_body_over_the_upload_limit_answers_413_in_json(joined, client, api):
    _, agent = joined
    padding = "x" * OVERSIZED
    big = agent.post("heartbeat", json.dumps(heartbeat("gpu-1", warnings=[padding])))
    assert big.status_code == 413 and big["Content-Type"] == "application/json"
    assert "payload" in big.json()["errors"]
    for path in ("/api/v1/keys", "/api/v1/token"):
        answer = api.post(path, {"name": padding}, format="json")
        assert answer.status_code == 413, (path, answer.status_code)
        assert answer["Content-Type"] == "application/json" and answer.json()["detail"], path
    login = client.post("/login/", {"username": padding, "password": "x"})
    assert login.status_code == 413 and login["Content-Type"] == "application/json"


@pytest.mark.django_db(transaction=True)
def test_the_gateway_refuses_deep_nesting_and_nul_in_the_model(gateway_server):
    from llmgw.catalog.models import Model
    from llmgw.serving import keys

    Model.objects.create(name="tiny", source="hf://x/tiny")
    key = keys.create_key("k", None, ["tiny"], False).key
    gateway_server.refresh()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    url = gateway_server.url + "/v1/chat/completions"
    nested = httpx.post(
        url, content='{"model": "tiny", "x": ' + deep(100_000) + "}", headers=headers
    )
    assert nested.status_code == 400, nested.text
    assert nested.json()["error"]["code"] == "invalid_json"
    nul = httpx.post(
        url, content=json.dumps({"model": "tiny\x00", "messages": []}), headers=headers
    )
    assert nul.status_code == 400, nul.text
    assert nul.json()["error"]["param"] == "model" and "NUL" in nul.json()["error"]["message"]
    content = httpx.post(
        url,
        content=json.dumps({"model": "tiny", "messages": [{"role": "user", "content": NUL}]}),
        headers=headers,
    )
    assert content.status_code == 400, content.text
    assert content.json()["error"]["param"] == "messages.0.content"
