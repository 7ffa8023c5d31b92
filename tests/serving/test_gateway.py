# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""The gateway end to end: the official openai client -> the gateway under
uvicorn -> engines that are real HTTP servers, on the test database."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
from django.core.cache import cache

from llmgw.catalog.models import Model, Profile
from llmgw.inventory.choices import NodeState
from llmgw.inventory.models import Node
from llmgw.serving import keys
from llmgw.serving.choices import ReplicaState
from llmgw.serving.gateway import load
from llmgw.serving.models import Replica, Shard
from tests.servers import free_port
from tests.serving.gateway_peers import CHAT, engines, gateway_server  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
MESSAGES = [{"role": "user", "content": "hi"}]


def replica(model: str, url: str, state: str = ReplicaState.READY) -> Replica:
    m, _ = Model.objects.get_or_create(name=model, defaults={"source": f"hf://x/{model}"})
    profile, _ = Profile.objects.get_or_create(model=m, name="cpu")
    # Ready, as a node whose agent reports its shards is: a NotReady
    # node's shards are not routed to.
    node, _ = Node.objects.get_or_create(
        name=f"node-{model}-{Replica.objects.count()}", defaults={"state": NodeState.READY}
    )
    r = Replica.objects.create(model=m, profile=profile, state=state)
    Shard.objects.create(replica=r, node=node, rank=0, url=url, state=state)
    return r


def key(*models: str, all_models: bool = False) -> str:
    for name in models:
        Model.objects.get_or_create(name=name, defaults={"source": f"hf://x/{name}"})
    return keys.create_key(f"k{time.monotonic_ns()}", None, models, all_models).key


def client(gw: Any, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=api_key, max_retries=0, timeout=20)


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def upstream_of(gw: Any, engine: Any) -> Any:
    return next(u for u in gw.gateway.router.upstreams() if u.url == engine.url)


def test_chat_non_streaming_and_streaming(gateway_server, engines):
    a = engines("a")
    replica("tiny", a.url)
    api_key = key("tiny")
    gateway_server.refresh()
    oa = client(gateway_server, api_key)

    answer = oa.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0.5)
    assert answer.choices[0].message.content == "hello"
    # The body reaches the engine as the client wrote it.
    assert a.bodies[-1]["messages"] == MESSAGES and a.bodies[-1]["temperature"] == 0.5

    stream = oa.chat.completions.create(model="tiny", messages=MESSAGES, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream)
    assert text == "a0 a1 a2 a3 "
    assert a.hits == 2


def test_completions_and_embeddings(gateway_server, engines):
    a = engines("a")
    replica("tiny", a.url)
    oa = client(gateway_server, key("tiny"))
    gateway_server.refresh()
    assert oa.completions.create(model="tiny", prompt="hi").choices[0].text == "hello"
    assert oa.embeddings.create(model="tiny", input="hi").data[0].embedding == [0.25, 0.5, 0.75]
    assert [b.get("prompt") or b.get("input") for b in a.bodies] == ["hi", "hi"]


def test_answers_name_the_model_the_client_asked_for(gateway_server, engines):
    # The fake engine names itself "m", as llama-server names its file.
    a = engines("a")
    replica("tiny", a.url)
    api_key = key("tiny")
    oa = client(gateway_server, api_key)
    gateway_server.refresh()
    assert oa.chat.completions.create(model="tiny", messages=MESSAGES).model == "tiny"
    chunks = list(oa.chat.completions.create(model="tiny", messages=MESSAGES, stream=True))
    assert len(chunks) == 4 and {c.model for c in chunks} == {"tiny"}
    assert oa.completions.create(model="tiny", prompt="hi").model == "tiny"
    assert oa.embeddings.create(model="tiny", input="hi").model == "tiny"
    # Everything else as the engine wrote it.
    raw = httpx.post(
        gateway_server.url + "/v1/chat/completions",
        json={"model": "tiny", "messages": MESSAGES},
        headers={"authorization": f"Bearer {api_key}"},
    )
    assert raw.json() == {**CHAT, "model": "tiny", "served_by": "a"}
    assert int(raw.headers["content-length"]) == len(raw.content)


def test_models_lists_what_the_key_may_use(gateway_server, engines):
    Model.objects.create(name="secret", source="hf://x/secret")
    scoped = key("tiny")
    everything = key(all_models=True)
    gateway_server.refresh()
    assert [m.id for m in client(gateway_server, scoped).models.list()] == ["tiny"]
    assert [m.id for m in client(gateway_server, everything).models.list()] == ["secret", "tiny"]
    assert client(gateway_server, scoped).models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError):
        client(gateway_server, scoped).models.retrieve("secret")


def test_errors_are_openai_shaped(gateway_server, engines):
    replica("tiny", engines("a").url)
    Model.objects.create(name="cold", source="hf://x/cold")
    Model.objects.create(name="secret", source="hf://x/secret")
    good = client(gateway_server, key("tiny", "cold"))
    gateway_server.refresh()

    with pytest.raises(openai.AuthenticationError) as bad_key:
        client(gateway_server, "sk-llmgw-wrong").chat.completions.create(
            model="tiny", messages=MESSAGES
        )
    assert bad_key.value.status_code == 401 and bad_key.value.code == "invalid_api_key"
    missing = httpx.post(gateway_server.url + "/v1/chat/completions", json={"model": "tiny"})
    assert missing.status_code == 401
    assert set(missing.json()["error"]) == {"message", "type", "param", "code"}

    with pytest.raises(openai.NotFoundError) as unknown:
        good.chat.completions.create(model="nope", messages=MESSAGES)
    assert unknown.value.code == "model_not_found"
    # A model the key may not use reads exactly like one that does not
    # exist: a key cannot probe the catalog.
    with pytest.raises(openai.NotFoundError) as unscoped:
        good.chat.completions.create(model="secret", messages=MESSAGES)
    assert unscoped.value.code == "model_not_found"
    assert unscoped.value.message.replace("secret", "nope") == unknown.value.message

    with pytest.raises(openai.InternalServerError) as cold:
        good.chat.completions.create(model="cold", messages=MESSAGES)
    assert cold.value.status_code == 503 and cold.value.code == "no_ready_replica"
    assert int(cold.value.response.headers["retry-after"]) > 0

    with pytest.raises(openai.BadRequestError):
        good.chat.completions.create(model="", messages=MESSAGES)
    broken = httpx.post(
        gateway_server.url + "/v1/embeddings",
        content=b"{not json",
        headers={"authorization": f"Bearer {good.api_key}"},
    )
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"


def test_a_replica_that_is_not_ready_gets_nothing(gateway_server, engines):
    loading = engines("loading")
    replica("tiny", loading.url, state=ReplicaState.LOADING)
    oa = client(gateway_server, key("tiny"))
    gateway_server.refresh()
    # The request waits for the replica to be ready (flow.py), then gives up.
    gateway_server.gateway.flow.wait_s = 0.5
    with pytest.raises(openai.InternalServerError) as waited:
        oa.chat.completions.create(model="tiny", messages=MESSAGES)
    assert waited.value.status_code == 503 and waited.value.code == "queue_timeout"
    assert loading.hits == 0


def test_retry_elsewhere_before_the_first_byte(gateway_server, engines):
    good, on_fire = engines("good"), engines("fire", mode="500")
    replica("tiny", dead_url())
    replica("tiny", good.url)
    replica("tiny", on_fire.url)
    oa = client(gateway_server, key("tiny"))
    gateway_server.refresh()
    # The good replica looks busiest, so every other one is tried first.
    up = upstream_of(gateway_server, good)
    up.engine_queue, up.scraped_at = 10.0, time.monotonic()

    answer = oa.chat.completions.create(model="tiny", messages=MESSAGES)
    assert answer.model_extra["served_by"] == "good"
    assert on_fire.hits == 1 and good.hits == 1 and gateway_server.gateway.proxy.retries == 2
    # Both failed replicas now wait out their back-off: the next request
    # goes straight to the one that answers.
    oa.chat.completions.create(model="tiny", messages=MESSAGES)
    assert on_fire.hits == 1 and good.hits == 2 and gateway_server.gateway.proxy.retries == 2

    # All replicas failing: the last engine's 5xx comes through as it was.
    good.mode = "500"
    gateway_server.gateway.router.table["tiny"] = [up]
    with pytest.raises(openai.InternalServerError) as failed:
        oa.chat.completions.create(model="tiny", messages=MESSAGES)
    assert failed.value.status_code == 500 and "engine on fire" in failed.value.message


def test_a_stream_is_retried_when_it_ends_before_its_first_byte(gateway_server, engines):
    good, drops = engines("good"), engines("drops", mode="refuse_stream")
    replica("tiny", good.url)
    replica("tiny", drops.url)
    oa = client(gateway_server, key("tiny"))
    gateway_server.refresh()
    up = upstream_of(gateway_server, good)
    up.engine_queue, up.scraped_at = 10.0, time.monotonic()
    stream = oa.chat.completions.create(model="tiny", messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == "good0 good1 good2 good3 "
    assert drops.hits == 1 and good.hits == 1 and gateway_server.gateway.proxy.retries == 1


def test_only_dead_replicas_is_a_502(gateway_server, engines):
    replica("tiny", dead_url())
    oa = client(gateway_server, key("tiny"))
    gateway_server.refresh()
    with pytest.raises(openai.APIStatusError) as failed:
        oa.chat.completions.create(model="tiny", messages=MESSAGES)
    assert failed.value.status_code == 502 and failed.value.code == "upstream_unavailable"


def test_a_stream_that_breaks_after_its_first_byte_ends_with_an_error_event(
    gateway_server,
    engines,
):
    broken, spare = engines("broken", mode="die_mid_stream"), engines("spare")
    replica("tiny", broken.url)
    replica("tiny", spare.url)
    api_key = key("tiny")
    gateway_server.refresh()
    up = upstream_of(gateway_server, spare)
    up.engine_queue, up.scraped_at = 10.0, time.monotonic()

    seen = []
    with pytest.raises(openai.APIError) as failed:
        for c in client(gateway_server, api_key).chat.completions.create(
            model="tiny", messages=MESSAGES, stream=True
        ):
            seen.append(c.choices[0].delta.content)
    assert seen == ["broken0 ", "broken1 "]
    assert "failed mid-stream" in str(failed.value)
    # Not retried: the client already had bytes from the broken replica.
    assert spare.hits == 0

    raw = httpx.post(
        gateway_server.url + "/v1/chat/completions",
        json={"model": "tiny", "messages": MESSAGES, "stream": True},
        headers={"authorization": f"Bearer {api_key}"},
    )
    events = [line for line in raw.text.split("\n\n") if line]
    assert events[-1].startswith('data: {"error":')
    assert '"code":"upstream_stream_broken"' in events[-1]


def test_a_client_that_hangs_up_cancels_the_upstream_request(gateway_server, engines):
    stalled = engines("stalled", mode="stall")
    replica("tiny", stalled.url)
    api_key = key("tiny")
    gateway_server.refresh()
    with (
        httpx.Client(timeout=20) as http,
        http.stream(
            "POST",
            gateway_server.url + "/v1/chat/completions",
            json={"model": "tiny", "messages": MESSAGES, "stream": True},
            headers={"authorization": f"Bearer {api_key}"},
        ) as response,
    ):
        # Keep the iterator: a dropped one closes the response, a hang-up.
        chunks = response.iter_bytes()
        assert next(chunks).startswith(b"data: ")
        assert upstream_of(gateway_server, stalled).in_flight == 1
    # Leaving the block closes the connection: the engine sees the hang-up.
    assert stalled.hung_up.wait(10)
    up = upstream_of(gateway_server, stalled)
    for _ in range(200):
        if up.in_flight == 0:
            break
        time.sleep(0.05)
    assert up.in_flight == 0 and up.waiting == 0
    assert gateway_server.gateway.requests["tiny"]["499"] == 1


def test_routing_prefers_fewer_in_flight_and_a_smaller_scraped_queue(
    gateway_server,
    engines,
):
    a, b = engines("a", mode="stall"), engines("b")
    replica("tiny", a.url)
    replica("tiny", b.url)
    api_key = key("tiny")
    oa = client(gateway_server, api_key)
    gateway_server.refresh()

    # b's engine reports a queue: everything goes to a.
    b.queue = 2
    gateway_server.scrape()
    assert upstream_of(gateway_server, b).engine_queue == 2.0
    with (
        httpx.Client(timeout=20) as http,
        http.stream(
            "POST",
            gateway_server.url + "/v1/chat/completions",
            json={"model": "tiny", "messages": MESSAGES, "stream": True},
            headers={"authorization": f"Bearer {api_key}"},
        ) as held,
    ):
        chunks = held.iter_bytes()
        next(chunks)
        assert a.hits == 1 and b.hits == 0
        # b's queue empties; a has one request in flight (the held stream):
        # now b is the less loaded.
        b.queue = None
        gateway_server.scrape()
        assert upstream_of(gateway_server, b).engine_queue is None
        for _ in range(5):
            assert oa.embeddings.create(model="tiny", input="x").model_extra["served_by"] == "b"
    assert a.hits == 1 and b.hits == 5


def test_revoked_key_is_refused_after_the_refresh(gateway_server, engines):
    replica("tiny", engines("a").url)
    created = keys.create_key("revocable", None, ["tiny"])
    oa = client(gateway_server, created.key)
    gateway_server.refresh()
    assert oa.chat.completions.create(model="tiny", messages=MESSAGES)
    keys.revoke_key(created.api_key)
    gateway_server.refresh()
    with pytest.raises(openai.AuthenticationError):
        oa.chat.completions.create(model="tiny", messages=MESSAGES)


def test_last_used_is_written_by_the_background_flush(gateway_server, engines):
    replica("tiny", engines("a").url)
    created = keys.create_key("used", None, ["tiny"])
    gateway_server.refresh()
    client(gateway_server, created.key).embeddings.create(model="tiny", input="x")
    gateway_server.publish()
    created.api_key.refresh_from_db()
    assert created.api_key.last_used_at is not None


def test_queue_depth_reaches_the_reconciler_and_metrics(gateway_server, engines, api):
    cache.clear()
    assert load.queue_depth("tiny") is None  # no gateway has reported: unknown
    a, b = engines("a"), engines("b")
    replica("tiny", a.url)
    replica("tiny", b.url)
    Model.objects.create(name="cold", source="hf://x/cold")
    oa = client(gateway_server, key("tiny", "cold"))
    gateway_server.refresh()
    a.queue, b.queue = 3, 1.5
    gateway_server.scrape()
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            oa.chat.completions.create(model="cold", messages=MESSAGES)
    gateway_server.publish()
    assert load.queue_depth("tiny") == 4.5
    # No replica: the refused requests are the demand.
    assert load.queue_depth("cold") == 2.0
    text = api.get("/metrics").content.decode()
    assert 'llmgw_gateway_queue_depth{model="tiny"} 4.5' in text
    assert 'llmgw_gateway_requests_total{code="503",model="cold"} 2.0' in text
    gateway_server.server.call(gateway_server.gateway.stop())
    assert load.queue_depth("tiny") is None


def test_the_control_plane_app_sends_v1_to_the_gateway(asgi_server):
    """llmgw.asgi.application in a server process of its own."""
    created = keys.create_key("asgi", None, all_models=True)
    Model.objects.create(name="tiny", source="hf://x/tiny")
    refused = httpx.get(asgi_server + "/v1/models")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    listed = httpx.get(
        asgi_server + "/v1/models", headers={"authorization": f"Bearer {created.key}"}
    )
    assert [m["id"] for m in listed.json()["data"]] == ["tiny"]
    # Everything else is still Django's.
    assert httpx.get(asgi_server + "/api/v1/keys").status_code in (401, 403)
