"""Fuzzing the edges, on PostgreSQL: payloads of the agent protocol, drawn
from its own structs and then spoiled with hostile strings, numbers, keys
and nesting, through the real agent API; and every operation of
/api/schema/ through schemathesis against uvicorn. No answer may be a 5xx,
a refused payload must leave nothing stored, and no accepted one may break
a page."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmgw_agent.protocol import telemetry as t

from llmgw.fabrics.models import Port
from llmgw.inventory.models import Filesystem, Gpu, ModelHolding, Node
from tests.payloads import heartbeat, registration

PAGES = ["/api/v1/nodes/", "/metrics", "/", "/api/v1/nvlink", "/console/api/nodes/gpu-1"]

HOSTILE_TEXT = st.sampled_from(
    [
        "\x00",
        "gpu\x00",
        "\ud800",
        "\udfff",
        "x\udbff",
        "²",
        "٣",
        "\u202e",
        "",
        " ",
        "\n",
        "\\u0000",
        "%00",
        "0x" + "f" * 40,
        "x" * 300,
        "🙂" * 40,
    ]
) | st.text(max_size=20)
HOSTILE_NUMBER = (
    st.sampled_from(
        [
            float("nan"),
            float("inf"),
            float("-inf"),
            1e308,
            -1,
            -0.0,
            0.5,
            2**31,
            2**63,
            2**64,
            -(2**63) - 1,
            10**30,
        ]
    )
    | st.integers()
)


def deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


HOSTILE = (
    HOSTILE_TEXT
    | HOSTILE_NUMBER
    # Copied: spoil() changes what it is given, and a drawn value must not
    # carry one example's changes into the next.
    | st.sampled_from([None, True, [], {}, [None], {"\x00": 1}, {"\ud800": 1}]).map(copy.deepcopy)
    | st.integers(60, 200).map(deep)
)


def structs(spec: Any, max_size: int = 3) -> Any:
    """Items of a protocol struct with arbitrary field values, as JSON sees them."""
    return st.lists(st.from_type(spec).map(msgspec.to_builtins), max_size=max_size)


SECTIONS = {
    "register": {
        "gpus": structs(t.GpuIdentity),
        "gpu_topology": st.from_type(t.GpuTopology).map(msgspec.to_builtins),
        "imex": st.from_type(t.Imex).map(msgspec.to_builtins),
    },
    "heartbeat": {
        "gpus": structs(t.GpuSample),
        "sensors": st.from_type(t.Sensors).map(msgspec.to_builtins),
        "imex": st.from_type(t.Imex).map(msgspec.to_builtins),
        "engines": structs(t.Engine),
        "ports": structs(t.PortSample),
        "shards": structs(t.ShardReport),
        "subnet_managers": structs(t.ManagerListing),
        "sxids": st.from_type(t.XidCounters),
    },
}


def spoil(draw: Any, value: Any) -> Any:
    """`value` with one place in it (a value, or a key) made hostile."""
    if isinstance(value, dict) and value and draw(st.integers(0, 3)):
        key = draw(st.sampled_from(sorted(value)))
        if draw(st.integers(0, 5)) == 0:
            value[draw(HOSTILE_TEXT)] = value.pop(key)
        else:
            value[key] = spoil(draw, value[key])
        return value
    if isinstance(value, list) and value and draw(st.integers(0, 3)):
        i = draw(st.integers(0, len(value) - 1))
        value[i] = spoil(draw, value[i])
        return value
    return draw(HOSTILE)


@st.composite
def payloads(draw: Any) -> tuple[str, str]:
    endpoint = draw(st.sampled_from(["register", "heartbeat"]))
    base = (registration if endpoint == "register" else heartbeat)("gpu-1")
    for name, strategy in SECTIONS[endpoint].items():
        if draw(st.booleans()):
            base[name] = draw(strategy)
    for _ in range(draw(st.integers(0, 3))):
        base = spoil(draw, base)
    return endpoint, json.dumps(base)


def stored(node: Node) -> Any:
    """Everything a payload can write, to compare before and after."""
    return (
        Node.objects.filter(pk=node.pk).values().get(),
        list(Gpu.objects.filter(node=node).values().order_by("index")),
        list(Filesystem.objects.filter(node=node).values().order_by("mount")),
        list(ModelHolding.objects.filter(node=node).values().order_by("model_name")),
        list(Port.objects.filter(node=node).values().order_by("device", "port")),
    )


@pytest.mark.django_db(transaction=True)
def test_hostile_agent_payloads_never_answer_5xx_nor_store_what_is_refused(make_node, operator):
    from django.test import Client

    node, credential = make_node("gpu-1")
    # A 500 must come back as an answer to assert on, not as an exception.
    agent = Client(raise_request_exception=False)
    pages = Client(raise_request_exception=False)
    pages.force_login(operator)
    assert (
        agent.post(
            "/api/agent/v1/register",
            json.dumps(registration("gpu-1")),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Node {credential}",
        ).status_code
        == 200
    )

    # State carries over between examples: a page broken now may have been
    # broken by a payload accepted earlier, so the failure names that one.
    accepted: list[str] = ["(the first registration)"]

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(payloads())
    def post(drawn: tuple[str, str]) -> None:
        endpoint, body = drawn
        before = stored(node)
        answer = agent.post(
            f"/api/agent/v1/{endpoint}",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Node {credential}",
        )
        assert answer.status_code < 500, (endpoint, body[:2000])
        if answer.status_code >= 400:
            # 403: the payload named another node (recorded, as an audit event).
            assert answer.status_code in (400, 403), (answer.status_code, body[:2000])
            assert answer.json()["errors"], body[:2000]
            assert stored(node) == before, (answer.json(), body[:2000])
        else:
            accepted.append(f"{endpoint}: {body[:2000]}")
        for path in PAGES:
            assert pages.get(path).status_code == 200, (path, accepted[-1])

    post()


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
def fleet(asgi_server: str, django_user_model: Any) -> dict[str, Any]:
    """A running control plane with something behind each path: a joined,
    registered node, a model and a key; and the headers that reach them."""
    import httpx

    from llmgw.catalog import services as catalog
    from llmgw.inventory import services
    from llmgw.serving import keys

    django_user_model.objects.create_superuser("root", password="a-long-test-password")
    # Made the way a user makes one, whatever the token model is.
    token = httpx.post(
        asgi_server + "/api/v1/token",
        json={"username": "root", "password": "a-long-test-password"},
    ).json()["token"]
    credential = services.join("gpu-1", services.add_node("gpu-1", "test"))
    agent = {"Authorization": f"Node {credential}"}
    assert httpx.post(
        asgi_server + "/api/agent/v1/register", json=registration("gpu-1"), headers=agent
    ).is_success
    catalog.apply_text(CATALOG)
    key = keys.create_key("ci", None, ["tiny"], False).api_key
    return {
        "url": asgi_server,
        "rest": {"Authorization": f"Token {token}"},
        "agent": agent,
        "known": {"name": "tiny", "id": key.pk, "pk": key.pk},
        "node": "gpu-1",
    }


def fuzz(operation: Any, headers: dict[str, str], known: dict[str, Any]) -> list[str]:
    """One operation's server errors, as curl commands that repeat them."""
    from schemathesis import GenerationMode
    from schemathesis.checks import CHECKS
    from schemathesis.core.failures import Failure, FailureGroup

    found: list[str] = []
    strategies = [operation.as_strategy(generation_mode=mode) for mode in GenerationMode]
    if known:
        strategies.append(operation.as_strategy(path_parameters=known))

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.one_of(strategies))
    def call(case: Any) -> None:
        response = case.call(headers=headers)
        if response.status_code >= 500:
            found.append(f"{response.status_code}: {case.as_curl_command(headers)}")
            return
        try:
            case.validate_response(response, checks=CHECKS.get_all(), headers=headers)
        except (Failure, FailureGroup):
            pass  # the schema's own conformance is not this test's business

    call()
    return found


def test_schemathesis_finds_no_server_error_in_the_api(fleet):
    """Every operation of /api/schema/, in schemathesis's positive and
    negative modes and with the paths of objects that exist, against
    uvicorn, with every check it has. What the checks say about the schema
    itself (an undocumented 404 or 400, and such) is not this test's
    business; a 5xx is, and so is a page that a stored value breaks later."""
    import httpx
    import schemathesis

    schema = schemathesis.openapi.from_url(fleet["url"] + "/api/schema/", headers=fleet["rest"])
    server_errors: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        agent = operation.path.startswith("/api/agent/")
        known = {
            p.name: fleet["node"] if "/nodes/" in operation.path else fleet["known"][p.name]
            for p in operation.path_parameters
            if p.name in fleet["known"]
        }
        server_errors += fuzz(operation, fleet["agent"] if agent else fleet["rest"], known)
    assert not server_errors, "\n".join(server_errors)
    # What the fuzzing stored must not break a page that reads it.
    for path in (
        "/api/v1/nodes/",
        "/api/v1/models/",
        "/api/v1/models/tiny/",
        "/api/v1/models/tiny/headroom/",
        "/api/v1/models/tiny/explain/",
        "/api/v1/keys/",
        "/api/v1/nvlink",
        "/metrics",
    ):
        answer = httpx.get(fleet["url"] + path, headers=fleet["rest"])
        assert answer.status_code == 200, (path, answer.text[:500])
