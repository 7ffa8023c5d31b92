"""Where a node sits, read from its labels: llmgw.io/site, room, row and rack
(a tree) and llmgw.io/pdu (beside it). One spelling for every surface that
prints a location, and for the scheduler (pure, so this imports nothing)."""

from __future__ import annotations

from collections.abc import Mapping

LEVELS = ("site", "room", "row", "rack", "pdu")
TREE = LEVELS[:4]
LABEL_PREFIX = "llmgw.io/"


def label(level: str) -> str:
    return LABEL_PREFIX + level


def location(labels: Mapping[str, str]) -> str:
    """site/room/row/rack ("-" for a level not set), then the PDU after a colon,
    as `llmgw ctl nodes` prints it: "-/hall1/row01/r01:r01-pdu0"; "" when the
    labels say nothing of either."""
    levels = [labels.get(label(level)) for level in TREE]
    pdu = labels.get(label("pdu"))
    if not any(levels) and not pdu:
        return ""
    return "/".join(v or "-" for v in levels) + (f":{pdu}" if pdu else "")


def split_domain(text: str) -> tuple[str | None, str]:
    """A domain as operators write it, LEVEL=VALUE, as (level, value); a
    node's name as (None, it). A ValueError says what is wrong, in words
    every surface prints after "domain: "."""
    if "=" not in text:
        return None, text
    level, value = (part.strip() for part in text.split("=", 1))
    if level not in LEVELS:
        raise ValueError(
            f"{level!r} is not a level; write LEVEL=VALUE with LEVEL one of "
            + ", ".join(LEVELS)
            + ", or a node name"
        )
    if not value:
        raise ValueError(f"{level}= needs a value")
    return level, value
