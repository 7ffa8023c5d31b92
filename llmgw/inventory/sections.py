"""The heartbeat's sections, each stored by the app it belongs to.

A section is a part of the heartbeat stored durably only when it changed:
each app registers its own at start-up (its AppConfig.ready()), and the
inventory's handler (llmgw.inventory.heartbeats) iterates them. The inventory
never learns which apps read a heartbeat, so it imports none of them.

Whether a section changed is worked out from digests kept on the node row,
which the heartbeat's single UPDATE ... RETURNING reads back; a store runs
inside that heartbeat's durable transaction, under the node's row lock,
and only when a digest differs there too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from llmgw.inventory.models import Node

Payload = dict[str, Any]


@dataclass(frozen=True)
class Section:
    """`payload_keys`: the heartbeat keys that bring the section in (any
    one of them). `key(data)`: for each of `columns` (Node digest columns)
    to compare this time, what of the payload it digests; a column left
    out is not compared. `store(node, data, now)`: stores the section and
    returns further Node columns to update (the digests are added).
    `recorded(node)`: what the control plane keeps of the section for the
    node, as the agent's doctor is told it (the app reads its own rows)."""

    name: str
    payload_keys: tuple[str, ...]
    columns: tuple[str, ...]
    key: Callable[[Payload], dict[str, Any]]
    store: Callable[[Node, Payload, datetime], dict[str, Any]]
    recorded: Callable[[Node], dict[str, Any]] | None = None


_sections: list[Section] = []
_registration_hooks: list[Callable[[Node], None]] = []


def register(section: Section) -> None:
    """Sections are stored in the order registered: the apps' in
    INSTALLED_APPS order, each app's in the order it gives."""
    if section in _sections:
        return  # ready() run twice
    for other in _sections:
        if other.name == section.name or set(other.columns) & set(section.columns):
            # One column compared by two stores: each would mark the other's
            # change as stored.
            raise ValueError(f"heartbeat section {section.name} clashes with {other.name}")
    _sections.append(section)


def registered() -> tuple[Section, ...]:
    return tuple(_sections)


def on_registration(hook: Callable[[Node], None]) -> None:
    """Call `hook(node)` inside each agent registration's transaction, once
    the node row is stored."""
    if hook not in _registration_hooks:
        _registration_hooks.append(hook)


def registration_hooks() -> tuple[Callable[[Node], None], ...]:
    return tuple(_registration_hooks)
