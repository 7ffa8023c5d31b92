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

from llmgw.database import own
from llmgw.database.deadline import watchdog
from llmgw.database.queue import answers, make_patient

# Runs of one statement on a connection before it is kept prepared: the
# same few statements run thousands of times, one-off shapes never reach it.
PREPARE_AFTER = 2


class Operations(base.DatabaseOperations):  # type: ignore[misc]  # Django ships no types
    def last_executed_query(self, cursor: Any, sql: str, params: Any) -> str | None:
        # Django reads a client-bound cursor's composed text, which a
        # prepared_cursor() has none of: its statements are composed here,
        # for DEBUG's log and the tests counting queries, as the server-bound
        # backend itself does.
        if isinstance(cursor, base.ServerBindingCursor):
            try:
                return str(self.compose_sql(sql, params))
            except Exception:  # noqa: BLE001 - a text for a log; none rather than a failure
                return None
        query: str | None = super().last_executed_query(cursor, sql, params)
        return query


class DatabaseWrapper(base.DatabaseWrapper):  # type: ignore[misc]  # Django ships no types
    ops_class = Operations

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.execute_wrappers.append(self._bounded_execute)

    @property
    def pool(self) -> Any:
        default = super().pool
        if default is None:
            return None
        mine = own.name()
        # A thread with a pool of its own (llmgw.database.own) never waits
        # behind the requests for one of theirs.
        pool = default if mine is None else own.pool_for(self, self._connection_pools, mine)
        make_patient(pool, settings.DATABASE_QUEUE_S)
        return pool

    def close_pool(self) -> None:
        """Close this database's pools, its threads' own ones too."""
        for key in [k for k in self._connection_pools if k.startswith(f"{self.alias}/")]:
            self._connection_pools.pop(key).close()
        default = self._connection_pools.pop(self.alias, None)
        if default is not None:
            default.close()

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        # Django turns psycopg's automatic preparing off, for connection
        # poolers. Only prepared_cursor()'s statements are ever prepared:
        # the default cursors bind on the client, which never prepares.
        params["prepare_threshold"] = PREPARE_AFTER
        return params

    def prepared_cursor(self) -> Any:
        """A cursor that binds its parameters on the server, so that psycopg
        keeps a statement prepared on this connection once it has run
        PREPARE_AFTER times: PostgreSQL then neither parses nor plans it
        again. For the few statements run under placement's lock on every
        decision, where planning was most of the server's time (a catalog
        join planned in 0.54 ms and ran in 0.11). One statement a call,
        its parameters typed by their Python values: not for every query."""
        if self.connection is None or not self.in_atomic_block:
            # Inside a transaction the connection is the one it began on:
            # neither checked nor replaced there (a tenth of the cursor's cost).
            self.close_if_health_check_failed()
            self.ensure_connection()
        with self.wrap_database_errors:
            return self._prepare_cursor(base.ServerBindingCursor(self.connection))

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
