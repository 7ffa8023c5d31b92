"""Django's `transaction.atomic` as a typed decorator.

Django ships no types, so a function decorated with `transaction.atomic`
is Any to mypy, and so is everything its callers do with it. `atomic`
here is that same decorator (the function runs in a transaction, a
savepoint when one is already open) with the function's own signature.
"""

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import transaction

P = ParamSpec("P")
R = TypeVar("R")


def atomic(func: Callable[P, R]) -> Callable[P, R]:
    wrapped: Callable[P, R] = transaction.atomic(func)
    return wrapped
