# ruff: noqa: F811 (the fixtures imported from gateway_peers are parameters here)
"""Usage per key and model: read from the engines' `usage`, streams
included, saved to the database in batches, on /metrics, through the API
and `llmgw ctl keys`, and there again after a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llmgw.catalog.models import Model
from llmgw.cli import ctl
from llmgw.serving import keys
from llmgw.serving.gateway import usage
from llmgw.serving.models import ApiKey, KeyUsage
from tests.servers import ServerThread
from tests.serving.gateway_peers import engines, gateway_server  # noqa: F401
from tests.serving.test_gateway import replica
from tests.serving.test_gateway_llama import llama_server, predicted  # noqa: F401
from tests.tokens import make_token

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


class UsageEngine:
    """Streams as vLLM and OpenAI do when asked for usage: `"usage": null`
    in each event, then one event with no choices and the usage."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.server: ServerThread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        self.bodies.append(request)
        asked = (request.get("stream_options") or {}).get("include_usage") is True
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "/m.gguf"}
        events = []
        for word in ("one ", "two ", "three"):
            event = {**base, "choices": [{"index": 0, "delta": {"content": word}}]}
            events.append({**event, "usage": None} if asked else event)
        if asked:
            events.append(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
                }
            )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for event in events:
            data = b"data: " + json.dumps(event).encode() + b"\n\n"
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


@pytest.fixture
def usage_engine() -> Iterator[UsageEngine]:
    engine = UsageEngine()
    engine.server = ServerThread(engine).start()
    yield engine
    engine.server.stop()


def events(text: str) -> list[Any]:
    return [
        line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ")
    ]


def post(gw: Any, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=20,
    )


def test_a_stream_is_counted_and_the_client_gets_what_it_asked_for(gateway_server, usage_engine):
    replica("tiny", usage_engine.url)
    created = keys.create_key("k", None, ["tiny"])
    gateway_server.refresh()

    # Not asked: the gateway asks the engine, and the client's stream has
    # neither the usage event nor the nulls.
    plain = post(gateway_server, created.key, {**CHAT, "stream": True})
    assert usage_engine.bodies[-1]["stream_options"] == {"include_usage": True}
    assert usage_engine.bodies[-1]["messages"] == CHAT["messages"]
    got = events(plain.text)
    assert got[-1] == "[DONE]" and len(got) == 4
    assert all("usage" not in e and e["model"] == "tiny" for e in got[:-1])

    # Asked: passed on as the engine wrote it.
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    asked = events(post(gateway_server, created.key, body).text)
    assert asked[-2]["usage"]["prompt_tokens"] == 7 and asked[-2]["choices"] == []
    assert asked[0]["usage"] is None

    # Asked not to: the engine is asked all the same, the client is not given it.
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": False}}
    refused = events(post(gateway_server, created.key, body).text)
    assert usage_engine.bodies[-1]["stream_options"] == {"include_usage": True}
    assert all("usage" not in e for e in refused[:-1])

    gateway_server.server.call(gateway_server.gateway.save_usage())
    row = KeyUsage.objects.get()
    assert (row.api_key_id, row.model) == (created.api_key.pk, "tiny")
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (3, 21, 9)


def test_answers_are_summed_per_key_and_model_and_exported(gateway_server, engines, api):
    # The fake engine's chat answer reports 1 prompt and 1 completion token,
    # its embedding 1 prompt token.
    replica("tiny", engines("a").url)
    replica("big", engines("b").url)
    one = keys.create_key("one", None, ["tiny", "big"])
    two = keys.create_key("two", None, ["tiny"])
    gateway_server.refresh()
    for _ in range(3):
        assert post(gateway_server, one.key, CHAT).status_code == 200
    assert post(gateway_server, one.key, {**CHAT, "model": "big"}).status_code == 200
    assert post(gateway_server, two.key, CHAT).status_code == 200
    embedded = httpx.post(
        gateway_server.url + "/v1/embeddings",
        json={"model": "tiny", "input": "x"},
        headers={"authorization": f"Bearer {two.key}"},
    )
    assert embedded.status_code == 200
    # Nothing is written per request: the rows come with the batch.
    assert KeyUsage.objects.count() == 0
    gateway_server.server.call(gateway_server.gateway.save_usage())
    rows = {
        (r.api_key.name, r.model): (r.requests, r.prompt_tokens, r.completion_tokens)
        for r in KeyUsage.objects.select_related("api_key")
    }
    assert rows == {
        ("one", "tiny"): (3, 3, 3),
        ("one", "big"): (1, 1, 1),
        ("two", "tiny"): (2, 2, 1),
    }
    # A second batch adds to the first.
    assert post(gateway_server, one.key, CHAT).status_code == 200
    gateway_server.server.call(gateway_server.gateway.save_usage())
    assert KeyUsage.objects.get(api_key=one.api_key, model="tiny").prompt_tokens == 4

    text = api.get("/metrics").content.decode()
    key_id = one.api_key.pk
    assert (
        f'llmgw_gateway_key_tokens_total{{key="one",key_id="{key_id}",kind="prompt",model="tiny"}} 4.0'
        in text
    )
    assert (
        f'llmgw_gateway_key_requests_total{{key="one",key_id="{key_id}",model="big"}} 1.0' in text
    )


def test_usage_survives_a_restart(gateway_server, engines, api, operator):
    from django.core.asgi import get_asgi_application

    from llmgw.serving.gateway.app import Gateway, mount

    replica("tiny", engines("a").url)
    created = keys.create_key("ci", operator, ["tiny"])
    gateway_server.refresh()
    for _ in range(2):
        assert post(gateway_server, created.key, CHAT).status_code == 200
    # Stopping saves what is left: no batch is lost with the process.
    gateway_server.server.call(gateway_server.gateway.stop())

    again = Gateway(background=False)
    server = ServerThread(mount(again, get_asgi_application())).start()
    try:
        server.call(again.refresh())
        answer = httpx.post(
            server.url + "/v1/chat/completions",
            json=CHAT,
            headers={"authorization": f"Bearer {created.key}"},
        )
        assert answer.status_code == 200
        server.call(again.save_usage())
    finally:
        server.call(again.stop())
        server.stop()
    listed = api.get("/api/v1/keys/ci").json()
    assert listed["usage"] == {
        "requests": 3,
        "prompt_tokens": 3,
        "completion_tokens": 3,
        "models": {"tiny": {"requests": 3, "prompt_tokens": 3, "completion_tokens": 3}},
    }


def test_a_failed_save_is_kept_for_the_next():
    meter = usage.Meter()
    meter.add(1, "tiny", (5, 2))
    batch = meter.take()
    meter.add(1, "tiny", (1, 1))
    meter.add(1, "big", None)
    meter.put_back(batch)
    assert meter.batch == {(1, "tiny"): [2, 6, 3], (1, "big"): [1, 0, 0]}


def test_ask_for_usage_keeps_the_body_but_for_the_option():
    body = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "}"}]} \n'
    asked, drop = usage.ask_for_usage(body)
    assert drop and json.loads(asked) == {
        **json.loads(body),
        "stream_options": {"include_usage": True},
    }
    same, drop = usage.ask_for_usage(b'{"model":"m","stream_options":{"include_usage":true}}')
    assert not drop and same == b'{"model":"m","stream_options":{"include_usage":true}}'


def test_api_and_ctl_set_show_and_check_limits(asgi_server, operator, monkeypatch, capsys, api):
    Model.objects.create(name="tiny", source="hf://x/tiny")
    monkeypatch.setenv("LLMGW_URL", asgi_server)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))

    assert (
        ctl.main(["keys", "create", "ci", "--models", "tiny", "--rpm", "60", "--concurrency", "2"])
        == 0
    )
    key = ApiKey.objects.get()
    assert (key.requests_per_minute, key.tokens_per_minute, key.max_concurrent_requests) == (
        60,
        None,
        2,
    )
    KeyUsage.objects.create(
        api_key=key, model="tiny", requests=4, prompt_tokens=40, completion_tokens=9
    )
    capsys.readouterr()
    assert ctl.main(["keys", "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    header = listing[0].split()
    row = dict(zip(header, listing[-1].split(), strict=True))
    assert row["RPM"] == "60" and row["TPM"] == "-" and row["CONCURRENCY"] == "2"
    assert (row["REQUESTS"], row["PROMPT_TOKENS"], row["COMPLETION_TOKENS"]) == ("4", "40", "9")

    assert ctl.main(["keys", "limit", "ci", "--rpm", "none", "--tpm", "1000"]) == 0
    key.refresh_from_db()
    assert (key.requests_per_minute, key.tokens_per_minute, key.max_concurrent_requests) == (
        None,
        1000,
        2,
    )
    capsys.readouterr()
    assert ctl.main(["keys", "usage"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].split() == ["ci", "tiny", "4", "40", "9"]

    # Refusals name the field.
    with pytest.raises(SystemExit):
        ctl.main(["keys", "limit", "ci", "--rpm", "0"])
    assert "--rpm" in capsys.readouterr().err
    for body in (
        {"requests_per_minute": 0},
        {"tokens_per_minute": "many"},
        {"max_concurrent_requests": -1},
    ):
        refused = api.patch("/api/v1/keys/ci", body, format="json")
        assert refused.status_code == 400 and list(refused.json()) == list(body), refused.json()
    refused = api.patch("/api/v1/keys/ci", {"name": "other"}, format="json")
    assert refused.status_code == 400 and "name" in refused.json()
    made = api.post(
        "/api/v1/keys", {"name": "x", "models": ["tiny"], "tokens_per_minute": 0}, format="json"
    )
    assert made.status_code == 400 and "tokens_per_minute" in made.json()
    lifted = api.patch("/api/v1/keys/ci", {"max_concurrent_requests": None}, format="json")
    assert lifted.status_code == 200 and lifted.json()["max_concurrent_requests"] is None


def test_the_service_refuses_a_bad_limit_by_name(db):
    Model.objects.create(name="tiny", source="hf://x/tiny")
    for limits, words in (
        ({"requests_per_minute": 0}, "requests_per_minute: from 1"),
        ({"tokens_per_minute": True}, "tokens_per_minute: a whole number"),
        ({"per_hour": 5}, "per_hour: not a key limit"),
    ):
        with pytest.raises(keys.ApiKeyError, match=words):
            keys.create_key("k", None, ["tiny"], limits=limits)
    assert not ApiKey.objects.exists()


@pytest.mark.llama_server
def test_sums_match_llama_servers_usage_streaming_or_not(gateway_server, llama_server):
    """The real engine: what it reports to a client that asks, summed; and
    a stream whose client did not ask counted the same, by the engine's
    own count of tokens predicted."""
    replica("tiny", llama_server)
    created = keys.create_key("k", None, ["tiny"])
    gateway_server.refresh()
    before = predicted(llama_server)
    # ignore_eos: each answer is max_tokens long, so two alike report alike.
    chat = {**CHAT, "max_tokens": 6, "ignore_eos": True}
    whole = post(gateway_server, created.key, chat).json()["usage"]
    asked = events(
        post(
            gateway_server,
            created.key,
            {**chat, "stream": True, "stream_options": {"include_usage": True}},
        ).text
    )
    streamed = next(e["usage"] for e in reversed(asked[:-1]) if e.get("usage"))
    plain = events(post(gateway_server, created.key, {**chat, "stream": True}).text)
    assert plain[-1] == "[DONE]" and not any(e.get("usage") for e in plain[:-1])
    counted = ("prompt_tokens", "completion_tokens")
    assert [streamed[f] for f in counted] == [whole[f] for f in counted]
    assert whole["completion_tokens"] == 6

    gateway_server.server.call(gateway_server.gateway.save_usage())
    row = KeyUsage.objects.get(api_key=created.api_key, model="tiny")
    assert row.requests == 3
    assert row.prompt_tokens == 3 * whole["prompt_tokens"]
    assert row.completion_tokens == 3 * whole["completion_tokens"]
    assert row.completion_tokens == predicted(llama_server) - before


def test_a_database_that_fails_a_save_loses_no_usage_and_stops_no_publish(
    gateway_server, engines, monkeypatch, caplog
):
    from django.db import OperationalError

    from llmgw.serving.gateway import app, load

    replica("tiny", engines("a").url)
    created = keys.create_key("k", None, ["tiny"])
    gateway_server.refresh()
    assert post(gateway_server, created.key, CHAT).status_code == 200

    def down(batch: usage.Batch) -> None:
        raise OperationalError("the database is down")

    monkeypatch.setattr(app, "save", down)
    gateway_server.publish()
    # The load still went out, and the usage waits in memory.
    assert any(r["requests"].get("tiny") for r in load.reports())
    assert "usage not saved" in caplog.text and not KeyUsage.objects.exists()
    assert post(gateway_server, created.key, CHAT).status_code == 200
    monkeypatch.setattr(app, "save", usage.save)
    gateway_server.publish()
    row = KeyUsage.objects.get()
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (2, 2, 2)
