"""Facility domains as operators write them: LEVEL=VALUE, or a node's name.

A node says where it is with the labels llmgw.io/site, room, row, rack and
pdu. Site > room > row > rack is one tree; PDUs are a second hierarchy
beside it (a rack may have two, and a node names the one it hangs off), so
a PDU is not a child of a rack here and "rack=r01" never includes a PDU's
nodes in another rack.
"""

from __future__ import annotations

from collections.abc import Mapping

from llmgw.locations import LEVELS, label, split_domain
from llmgw.validation import text_problem

MAX_DOMAIN = 300


class DomainError(ValueError):
    pass


def parse(text: str) -> str:
    """The domain's key ("rack=r01", or a node's name), or a clear refusal."""
    text = (text or "").strip()
    if not text:
        raise DomainError("domain: write LEVEL=VALUE (" + ", ".join(LEVELS) + ") or a node name")
    if len(text) > MAX_DOMAIN:
        raise DomainError(f"domain: at most {MAX_DOMAIN} characters")
    problem = text_problem(text)
    if problem is not None:
        raise DomainError(f"domain: {problem}")
    try:
        level, value = split_domain(text)
    except ValueError as exc:
        raise DomainError(f"domain: {exc}") from None
    return text if level is None else f"{level}={value}"


def keys_of(name: str, labels: Mapping[str, str]) -> list[str]:
    """Every domain the node is in, largest first, itself last."""
    keys = [f"{level}={labels[label(level)]}" for level in LEVELS if labels.get(label(level))]
    keys.append(name)
    return keys


def describe(key: str) -> str:
    """ "rack r01" for "rack=r01"; "node n1" for a node's name."""
    level, sep, value = key.partition("=")
    return f"{level} {value}" if sep else f"node {key}"


def tree_path(labels: Mapping[str, str]) -> list[dict[str, str]]:
    """The node's place level by level, for pages and explanations."""
    return [
        {"level": level, "value": labels[label(level)]}
        for level in LEVELS
        if labels.get(label(level))
    ]
