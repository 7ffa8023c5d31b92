"""The REST API's request parsers: llmgw.validation's rules applied to every
body before a serializer sees it.

DRF's own JSONParser lets RecursionError out as a 500, turns 1e999 into
infinity, and hands DictField keys (labels) to the database with NUL and
lone surrogates in them; CharField alone refuses those.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import TooManyFieldsSent
from django.http import QueryDict
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from llmgw.validation import Refused, loads, problems


def _read(stream: Any) -> bytes:
    # llmgw.middleware has held the body to the upload limit already.
    return stream.read() if stream is not None else b""


class JSONParser(parsers.JSONParser):  # type: ignore[misc]  # DRF ships no types
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return loads(_read(stream))
        except Refused as refused:
            # {"labels": ["a key '\\x00' contains a NUL character"]}: the
            # same shape as a serializer's refusal.
            raise ParseError(refused.errors) from None


class FormParser(parsers.FormParser):  # type: ignore[misc]  # DRF ships no types
    """For /api/v1/token only, which takes `username` and `password` as a form
    too: percent-decoding cannot make a surrogate, but it can make a NUL."""

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> QueryDict:
        body = _read(stream)
        try:
            data = QueryDict(body, encoding=(parser_context or {}).get("encoding", "utf-8"))
        except TooManyFieldsSent as exc:
            raise ParseError({"payload": [str(exc)]}) from None
        errors = problems({key: data.getlist(key) for key in data})
        if errors:
            raise ParseError(errors)
        return data
