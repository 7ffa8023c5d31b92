"""Flow control: a request waits for capacity instead of failing.

Each model has a number of requests it may have in flight through this
process: its ready replicas times the per-replica limit. A request beyond
that, or for a model with no ready replica that is coming (held by the
catalog, or a replica being placed or started), waits in the model's queue,
bounded in length and in time. Requests leave the queue in arrival order:
whenever one finishes, and whenever the routing table changes (a replica
became ready), the head of the queue goes out while there is room.

A request never jumps the queue: one that arrives while others wait joins
the tail even if a slot is free this instant, so the oldest goes first.

Each web process has its own queue. Its length is part of the load the
process publishes (load.py), which the processes' reports sum to, and which
the reconciler reads: requests waiting for a model held at zero under load
place its first replica.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import deque
from collections.abc import Mapping, Sized
from typing import Any

from llmgw.serving.gateway.asgi import Receive, Send
from llmgw.serving.gateway.errors import send_error

# A model with requests waiting and no ready replica asks the reconciler to
# look now rather than at its next tick (10 s): at most once in this long.
ASK_EVERY_S = 10.0


class Admission(enum.Enum):
    GO = "go"
    # The queue is at its length: 429.
    FULL = "full"
    # Waited the whole bound: 503.
    TIMED_OUT = "timed_out"
    # The model has no ready replica and none is coming: 503 at once.
    NO_REPLICA = "no_replica"
    # The client hung up while waiting.
    GONE = "gone"


class Flow:
    def __init__(self, per_replica: int, length: int, wait_s: float) -> None:
        self.per_replica = per_replica
        self.length = length
        self.wait_s = wait_s
        # Per model: requests let through and not finished yet.
        self.admitted: dict[str, int] = {}
        self.capacity: dict[str, int] = {}
        # Models with no ready replica that may get one: worth waiting for.
        self.coming: frozenset[str] = frozenset()
        self._queues: dict[str, deque[asyncio.Future[Admission]]] = {}
        self._asked: dict[str, float] = {}

    def update(self, table: Mapping[str, Sized], coming: frozenset[str]) -> None:
        """The routing table changed: new capacities, and the queues move."""
        self.capacity = {model: len(ups) * self.per_replica for model, ups in table.items()}
        self.coming = coming
        for model in list(self._queues):
            self._drain(model)

    def depths(self) -> dict[str, int]:
        return {model: len(queue) for model, queue in self._queues.items() if queue}

    def starved(self) -> list[str]:
        """The models whose requests wait with no ready replica, not asked
        for within ASK_EVERY_S; asked for from now."""
        now = time.monotonic()
        found = [
            model
            for model, queue in self._queues.items()
            if queue
            and not self.capacity.get(model)
            and now - self._asked.get(model, -ASK_EVERY_S) >= ASK_EVERY_S
        ]
        for model in found:
            self._asked[model] = now
        return found

    def waiting(self, model: str) -> int:
        queue = self._queues.get(model)
        return len(queue) if queue else 0

    async def admit(self, model: str, receive: Receive) -> Admission:
        """Whether the request may go now, after waiting its turn, or why not.
        GO must be paired with one `release` when the request is done."""
        capacity = self.capacity.get(model, 0)
        admitted = self.admitted.get(model, 0)
        queue = self._queues.get(model)
        if not queue and admitted < capacity:
            self.admitted[model] = admitted + 1
            return Admission.GO
        if capacity == 0 and model not in self.coming:
            return Admission.NO_REPLICA
        if queue is None:
            queue = deque()
        if len(queue) >= self.length:
            return Admission.FULL
        self._queues[model] = queue
        turn: asyncio.Future[Admission] = asyncio.get_running_loop().create_future()
        queue.append(turn)
        return await self._wait(model, queue, turn, receive)

    async def _wait(
        self,
        model: str,
        queue: deque[asyncio.Future[Admission]],
        turn: asyncio.Future[Admission],
        receive: Receive,
    ) -> Admission:
        # The request's body is read: what the client sends next is its
        # hang-up (http.disconnect), which must take it out of the queue.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        hang_up: asyncio.Future[dict[str, Any]] | None = None
        try:
            while not turn.done():
                if hang_up is None:
                    hang_up = asyncio.ensure_future(receive())
                left = deadline - loop.time()
                if left <= 0:
                    break
                either: set[asyncio.Future[Any]] = {turn, hang_up}
                await asyncio.wait(either, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if turn.done():
                    break
                if hang_up.done():
                    if _hung_up(hang_up):
                        _leave(queue, turn)
                        return Admission.GONE
                    hang_up = None
        except asyncio.CancelledError:
            self._give_back(model, queue, turn)
            raise
        finally:
            if hang_up is not None and not hang_up.done():
                hang_up.cancel()
        if turn.done():
            result = turn.result()
            if result is Admission.GO and _hung_up(hang_up):
                # Let through in the same instant the client left.
                self.release(model)
                return Admission.GONE
            return result
        _leave(queue, turn)
        return Admission.TIMED_OUT

    def _give_back(
        self, model: str, queue: deque[asyncio.Future[Admission]], turn: asyncio.Future[Admission]
    ) -> None:
        if turn.done() and not turn.cancelled() and turn.result() is Admission.GO:
            self.release(model)
        else:
            _leave(queue, turn)

    def release(self, model: str) -> None:
        self.admitted[model] = max(0, self.admitted.get(model, 0) - 1)
        if self._queues.get(model):
            self._drain(model)

    def _drain(self, model: str) -> None:
        queue = self._queues[model]
        capacity = self.capacity.get(model, 0)
        if capacity == 0 and model not in self.coming:
            # Its replicas went and none is coming: no use waiting.
            while queue:
                _answer(queue.popleft(), Admission.NO_REPLICA)
        while queue and self.admitted.get(model, 0) < capacity:
            if _answer(queue.popleft(), Admission.GO):
                self.admitted[model] = self.admitted.get(model, 0) + 1
        if not queue:
            del self._queues[model]


async def turn_away(send: Send, model: str, why: Admission, retry_after_s: int) -> int:
    """Tell the client why its request does not go (nothing to a client that
    left); the status counted."""
    if why is Admission.GONE:
        return 499
    status, message, code = {
        Admission.NO_REPLICA: (
            503,
            f"The model `{model}` has no ready replica right now; retry shortly.",
            "no_ready_replica",
        ),
        Admission.FULL: (
            429,
            f"Too many requests are waiting for `{model}`; retry shortly.",
            "queue_full",
        ),
        Admission.TIMED_OUT: (
            503,
            f"The model `{model}` had no free replica within the time a request may "
            "wait; retry shortly.",
            "queue_timeout",
        ),
    }[why]
    # A full queue is the fleet's want of capacity, not the client's rate:
    # a server error, told with 429 so that clients back off.
    headers = [(b"retry-after", str(retry_after_s).encode())]
    await send_error(send, status, message, "server_error", code, headers=headers)
    return status


def _hung_up(hang_up: asyncio.Future[dict[str, Any]] | None) -> bool:
    # A receive that failed is a connection gone as surely as a disconnect.
    if hang_up is None or not hang_up.done() or hang_up.cancelled():
        return False
    return hang_up.exception() is not None or hang_up.result().get("type") == "http.disconnect"


def _answer(turn: asyncio.Future[Admission], result: Admission) -> bool:
    if turn.done():
        return False
    turn.set_result(result)
    return True


def _leave(queue: deque[asyncio.Future[Admission]], turn: asyncio.Future[Admission]) -> None:
    try:
        queue.remove(turn)
    except ValueError:
        pass
    turn.cancel()
