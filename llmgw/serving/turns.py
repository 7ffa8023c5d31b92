"""A process's placers take turns, and a turn places every call then
waiting, in one transaction.

Placements are made one at a time anyway (placement's advisory lock), so
eight API calls at once used to queue for eight turns of eight round
trips each, at 3-5 ms a round trip while 5,000 nodes beat on the same two
cores. One turn for all of them shares the lock, the warm fleet's look,
the nodes' desired state and the commit (serving.placing.place_held).

A call waits for its turn holding no database connection (its own goes
back to the pool: eight calls each holding one of the process's eight
left its other requests none); the turn's taker takes one before any lock
below, so it never waits for a lock while others wait for its connection.
A call made inside a transaction keeps it and places alone: others'
placements must not commit or roll back with a transaction that is not
theirs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import InterfaceError, OperationalError, connection

# The most calls one turn places: a turn's transaction holds placement's
# lock, and other processes' placers wait for it.
MOST = 32


@dataclass(eq=False)
class _Call:
    name: str
    alone: bool
    done: bool = False
    outcome: Any = None
    error: BaseException | None = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.outcome


class Turns:
    def __init__(self, place_many: Callable[[list[str]], list[Any]]) -> None:
        """`place_many(names)`: an outcome for each name, in order, made in
        one transaction; it raises when that transaction fails."""
        self._place_many = place_many
        self._changed = threading.Condition()
        self._waiting: list[_Call] = []
        self._busy = False
        # The size of each turn, last first (the tests read it).
        self.sizes: list[int] = []

    def place(self, name: str) -> Any:
        call = _Call(name, alone=connection.in_atomic_block)
        if not call.alone:
            connection.close()
        with self._changed:
            self._waiting.append(call)
            while self._busy and not call.done:
                self._changed.wait()
            if call.done:
                return call.result()
            self._busy = True
            batch = [call] if call.alone else [c for c in self._waiting if not c.alone][:MOST]
            for c in batch:
                self._waiting.remove(c)
        try:
            connection.ensure_connection()
            self._run(batch)
        finally:
            with self._changed:
                for c in batch:
                    c.done = True
                    if c.outcome is None and c.error is None:
                        c.error = RuntimeError("the placement was interrupted")
                self._busy = False
                self._changed.notify_all()
        return call.result()

    def _run(self, batch: list[_Call]) -> None:
        self.sizes = [len(batch), *self.sizes[:99]]
        try:
            outcomes = self._place_many([c.name for c in batch])
        except Exception as exc:
            if len(batch) == 1 or isinstance(exc, (OperationalError, InterfaceError)):
                # The database away fails them all alike: each alone would
                # wait out its own timeout, one after another.
                for c in batch:
                    c.error = exc
                return
            # One call's failure (a model deleted since it was asked for)
            # must not fail the others: each is placed alone.
            for c in batch:
                try:
                    c.outcome = self._place_many([c.name])[0]
                except Exception as alone:
                    c.error = alone
            return
        for c, outcome in zip(batch, outcomes, strict=True):
            c.outcome = outcome
