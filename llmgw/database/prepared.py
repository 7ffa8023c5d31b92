"""A cursor for the statements run on every placement (and other hot
paths): kept prepared on PostgreSQL (DatabaseWrapper.prepared_cursor), a
plain cursor on any other database."""

from __future__ import annotations

from typing import Any

from django.db import connection


def cursor() -> Any:
    make = getattr(connection, "prepared_cursor", None)
    return connection.cursor() if make is None else make()
