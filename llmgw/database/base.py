"""Django's PostgreSQL backend with a deadline on every statement, commit
and rollback (llmgw.database.deadline). Statements go through an execute
wrapper; COMMIT and ROLLBACK do not pass through one, so they are bounded
here too: a transaction's end is as likely as its statements to meet a
hung server. Each answer is recorded, so that a request waiting for a
pooled connection can tell a busy database from one that is out
(llmgw.database.queue)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.backends.postgresql import base

from llmgw.database.deadline import watchdog
from llmgw.database.queue import answers, make_patient


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.execute_wrappers.append(self._bounded_execute)

    @property
    def pool(self) -> Any:
        pool = super().pool
        if pool is not None:
            make_patient(pool, settings.DATABASE_QUEUE_S)
        return pool

    def _bounded(self, what: str) -> Any:
        try:
            fileno = self.connection.fileno()
        except Exception:  # noqa: BLE001 - closed already: the call itself fails, wrapped
            return contextlib.nullcontext()
        return watchdog.bound(fileno, settings.DATABASE_DEADLINE_S, what)

    def _bounded_execute(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        with self._bounded("a statement"):
            result = execute(sql, params, many, context)
        answers.answered()
        return result

    def _commit(self) -> None:
        if self.connection is None:
            return
        with self._bounded("COMMIT"):
            super()._commit()
        answers.answered()

    def _rollback(self) -> None:
        if self.connection is None:
            return
        with self._bounded("ROLLBACK"):
            super()._rollback()
