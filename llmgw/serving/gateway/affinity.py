"""Prefix-aware routing: a request goes to the replica that lately saw the
longest start of its prompt, while that replica is not much busier than
the least loaded one.

An engine that caches prompts (llama-server's prompt cache and slot reuse,
vLLM's automatic prefix caching, SGLang's radix cache) skips the prefill of
a prompt start it holds: for a chat, which resends its whole history each
turn, most of the work. Under least-loaded routing over N replicas a turn
lands where its history is about 1/N of the time.

The prompt (the chat messages, or a completion's prompt) is decoded from
the body and written out again in one canonical form, cut in blocks of
BLOCK_BYTES (about 64 tokens), and each block hashed chained with the one
before, so that a block's hash stands for the whole prompt up to its end
(llm-d's approximate prefix-cache scorer does the same over tokens). Each
replica has an LRU of the hashes of the prompts sent to it, bounded in
entries; its match for a request is how many leading blocks it holds.

Among the replicas whose load is at most `spread` requests above the least
loaded one's, the longest match wins (then the least loaded, then chance).
With no match there, the router's least-loaded choice stands. Each web
process keeps its own index and routes on it alone: on a miss, processes
spread by load and chance; on a hit, a replica busier than the spread
allows is passed over, whoever holds the prefix, so processes agreeing on
one replica cannot pile onto it.

The index holds what the gateway sent, not what the engine kept: an engine
evicts on its own terms. A replica's entries go when it leaves the routing
table or comes back as another upstream (another URL), and when its engine
restarted (a counter it exports only ever grows, and went down).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from llmgw.serving.gateway.exposition import sum_samples

if TYPE_CHECKING:
    from llmgw.serving.gateway.routing import Upstream

# About 64 tokens of English, llm-d's default block.
BLOCK_BYTES = 256
# Only the first 128 KiB of a prompt is looked at: hashing is on the
# request path, and a start that long already tells replicas apart.
MAX_REQUEST_BLOCKS = 512
PROMPT_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
# Which policy chose a request's replica: the longest cached prefix; load,
# no replica having seen any of it (or prefix routing off); load, the
# replicas holding it being busier than the spread allows.
POLICIES = ("prefix", "load", "balance")
# Engine counters that only grow while the engine runs.
RESTART_COUNTERS = frozenset(
    {"llamacpp:prompt_tokens_total", "vllm:prompt_tokens_total", "sglang:prompt_tokens_total"}
)


class _Message(msgspec.Struct):
    role: str = ""
    content: Any = None
    name: str | None = None
    tool_calls: Any = None


class _Prompt(msgspec.Struct):
    messages: list[_Message] | None = None
    prompt: Any = None
    tools: Any = None


_decode = msgspec.json.Decoder(_Prompt).decode
_encode = msgspec.json.Encoder(order="deterministic").encode


def prompt_bytes(body: bytes) -> bytes | None:
    """The prompt in one canonical form: formatting, key order and the
    fields that are not prompt (sampling, stream) left out. None when the
    body has none."""
    try:
        request = _decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if request.messages is not None:
        # Tools come first: chat templates write them into the system turn.
        parts = [_encode(request.tools)] if request.tools is not None else []
        for m in request.messages:
            parts.append(m.role.encode())
            parts.append(b"\x1e")
            if isinstance(m.content, str):
                parts.append(m.content.encode())
            elif m.content is not None:
                parts.append(_encode(m.content))
            if m.name is not None:
                parts.append(b"\x1e" + m.name.encode())
            if m.tool_calls is not None:
                parts.append(b"\x1e" + _encode(m.tool_calls))
            parts.append(b"\x1f")
        return b"".join(parts)
    if isinstance(request.prompt, str):
        return request.prompt.encode()
    if request.prompt is not None:
        return _encode(request.prompt)
    return None


def block_hashes(
    data: bytes, size: int = BLOCK_BYTES, limit: int = MAX_REQUEST_BLOCKS
) -> list[int]:
    """One hash per whole block, each over the blocks before it too; a
    tail shorter than a block is left out, as an engine caches in blocks."""
    hashes: list[int] = []
    h = 0
    # Python's own hash: salted per process, which is fine for an index
    # that never leaves its process, and the cheapest on the request path.
    for start in range(0, min(len(data) // size, limit) * size, size):
        h = hash((h, data[start : start + size]))
        hashes.append(h)
    return hashes


class PrefixIndex:
    """A replica's recently sent blocks, least recently sent evicted first."""

    __slots__ = ("blocks", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of the prompt this replica was sent."""
        blocks = self.blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def add(self, hashes: Sequence[int]) -> None:
        blocks = self.blocks
        # Last block first: a prompt's start, shared by more requests than
        # its end, is the most recent and is evicted last.
        for h in reversed(hashes[: self.capacity]):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


class Affinity:
    def __init__(
        self,
        *,
        enabled: bool = True,
        capacity: int = 16384,
        spread: float = 4.0,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.enabled = enabled
        # Blocks remembered per replica (about 100 bytes each).
        self.capacity = capacity
        # Requests a replica may have above the least loaded and still be
        # chosen for its prefix.
        self.spread = spread
        self.block_bytes = block_bytes
        self.indexes: dict[Upstream, PrefixIndex] = {}
        # Per model, per policy: this process's routed requests since it started.
        self.decisions: dict[str, dict[str, int]] = {}
        self._counters: dict[Upstream, float] = {}

    @classmethod
    def from_settings(cls) -> Affinity:
        from django.conf import settings

        return cls(
            enabled=settings.GATEWAY_PREFIX_ROUTING,
            capacity=settings.GATEWAY_PREFIX_BLOCKS,
            spread=settings.GATEWAY_PREFIX_SPREAD,
        )

    def hashes(self, path: str, body: bytes) -> list[int] | None:
        if not self.enabled or path not in PROMPT_PATHS:
            return None
        data = prompt_bytes(body)
        return block_hashes(data, self.block_bytes) if data else None

    def count(self, model: str, policy: str) -> None:
        counts = self.decisions.get(model)
        if counts is None:
            counts = self.decisions[model] = {}
        counts[policy] = counts.get(policy, 0) + 1

    def prefer(
        self,
        model: str,
        candidates: Iterable[Upstream],
        hashes: Sequence[int] | None,
        load: Callable[[Upstream], float],
    ) -> Upstream | None:
        """The replica to send to for its prefix, or None to route on load
        (counted as such either way)."""
        if not hashes or not self.indexes:
            self.count(model, "load")
            return None
        matches = []
        for up in candidates:
            index = self.indexes.get(up)
            matches.append((up, index.match(hashes) if index is not None else 0, load(up)))
        if not matches or not any(m for _, m, _ in matches):
            self.count(model, "load")
            return None
        least = min(ld for _, _, ld in matches)
        best: list[Upstream] = []
        best_key = (0, 0.0)
        for up, matched, ld in matches:
            if not matched or ld - least > self.spread:
                continue
            key = (-matched, ld)
            if not best or key < best_key:
                best, best_key = [up], key
            elif key == best_key:
                best.append(up)
        if not best:
            self.count(model, "balance")
            return None
        self.count(model, "prefix")
        return best[0] if len(best) == 1 else random.choice(best)

    def record(self, up: Upstream, hashes: Sequence[int]) -> None:
        index = self.indexes.get(up)
        if index is None:
            index = self.indexes[up] = PrefixIndex(self.capacity)
        index.add(hashes)

    def retain(self, upstreams: Iterable[Upstream]) -> None:
        """Forget every replica but these (the routing table's)."""
        keep = set(upstreams)
        for gone in [up for up in self.indexes if up not in keep]:
            del self.indexes[gone]
        for gone in [up for up in self._counters if up not in keep]:
            del self._counters[gone]

    def scraped(self, up: Upstream, text: str) -> None:
        """Forget the replica's prefixes if its engine restarted since the
        last scrape: its cache is empty."""
        total = sum_samples(text, RESTART_COUNTERS)
        if total is None:
            return
        before = self._counters.get(up)
        self._counters[up] = total
        if before is not None and total < before:
            self.indexes.pop(up, None)
