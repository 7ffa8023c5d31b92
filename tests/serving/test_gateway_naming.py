"""The engine's name for its model replaced by the client's, in a whole
answer and in a stream cut anywhere."""

from __future__ import annotations

import json

from llmgw.serving.gateway.naming import StreamRenamer, rename

PATH = "/var/lib/llmgw/models/tiny-llama/tiny-llama.gguf"


def event(i: int, end: bytes = b"\n\n") -> bytes:
    body = {"id": "c", "model": PATH, "choices": [{"delta": {"content": f'"model" {i}'}}]}
    return b"data: " + json.dumps(body).encode() + end


def models(stream: bytes) -> list[str]:
    lines = [line.strip() for line in stream.split(b"\n") if line.startswith(b"data: {")]
    return [json.loads(line[6:])["model"] for line in lines]


def test_a_whole_answer_names_the_asked_model_and_keeps_the_rest():
    body = json.dumps({"model": PATH, "choices": [{"text": "hi", "model": "inner"}]}).encode()
    assert json.loads(rename(body, "tiny")) == {
        "model": "tiny",
        "choices": [{"text": "hi", "model": "inner"}],
    }
    for untouched in (b"not json", b'["model"]', b'{"model": 3}', b'{"x": 1}'):
        assert rename(untouched, "tiny") is untouched
    same = json.dumps({"model": "tiny"}).encode()
    assert rename(same, "tiny") is same


def test_every_event_is_renamed_however_the_engine_cut_the_stream():
    stream = b"".join(event(i) for i in range(5)) + event(5, b"\r\n\r\n") + b"data: [DONE]\n\n"
    for size in (1, 7, 64, len(stream)):
        renamer = StreamRenamer("tiny")
        out = b"".join(renamer.feed(stream[i : i + size]) for i in range(0, len(stream), size))
        out += renamer.flush()
        assert models(out) == ["tiny"] * 6
        assert out.endswith(b"\r\n\r\ndata: [DONE]\n\n")
        assert out.count(b'\\"model\\" ') == 6  # the content as it was


def test_a_broken_stream_hands_back_what_it_held():
    renamer = StreamRenamer("tiny")
    assert renamer.feed(b'data: {"mod') == b""
    assert renamer.flush() == b'data: {"mod'
