"""An engine's answer, named for the model the client asked for.

Engines put their own name for the model in "model": llama-server its
weights' file path, vLLM whatever it was started with. A client asked for
the catalog's name and reads it back (the OpenAI clients show it, some
check it), and a file path tells it about the node's disks. The top-level
"model" of a JSON answer, and of every JSON event of a stream, is set to
the name the client asked for; anything else passes as the engine wrote it.
"""

from __future__ import annotations

from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_KEY = b'"model"'


def rename(body: bytes, model: str) -> bytes:
    """A JSON answer with its top-level "model" set to `model`; the body
    unchanged when it is not a JSON object naming another model."""
    if _KEY not in body:
        return body
    try:
        answer: Any = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return body
    if not isinstance(answer, dict) or not isinstance(answer.get("model"), str):
        return body
    if answer["model"] == model:
        return body
    answer["model"] = model
    return _encode(answer)


class StreamRenamer:
    """Renames each `data:` event of a server-sent event stream as it
    passes. The engine's chunks need not end on a line: what follows the
    last newline waits for the rest of its line (engines write one event a
    write, so in practice nothing waits)."""

    __slots__ = ("model", "_rest")

    def __init__(self, model: str) -> None:
        self.model = model
        self._rest = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._rest + chunk if self._rest else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._rest = data
            return b""
        self._rest = data[end + 1 :]
        whole = data[: end + 1]
        if _KEY not in whole:
            return whole
        return b"\n".join(self._line(line) for line in whole.split(b"\n"))

    def flush(self) -> bytes:
        """What is left when the stream ends (or breaks): as it came."""
        rest, self._rest = self._rest, b""
        return rest

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:") or _KEY not in line:
            return line
        # "data:" then an optional space (SSE), then the JSON; a line ending
        # in \r (CRLF events) keeps it.
        cr = b"\r" if line.endswith(b"\r") else b""
        payload = line[5 : len(line) - len(cr)]
        space = b" " if payload.startswith(b" ") else b""
        renamed = rename(payload[len(space) :], self.model)
        return b"data:" + space + renamed + cr
