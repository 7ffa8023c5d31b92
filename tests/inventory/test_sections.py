"""The heartbeat's sections belong to their apps; the inventory's handler
only iterates them, and imports none of those apps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from llmgw.inventory import sections

ROOT = Path(__file__).resolve().parents[2]
# The domain apps the inventory must not import: they import it.
OTHERS = ("catalog", "placement", "fabrics", "nvlink", "facility", "serving", "console", "metrics")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_every_section_is_registered_once_in_order() -> None:
    assert [s.name for s in sections.registered()] == [
        "filesystems",
        "weights",
        "gpu state",
        "gpu health",
        "shards",
        "ports",
    ]


def test_a_column_claimed_twice_is_refused() -> None:
    ports = next(s for s in sections.registered() if s.name == "ports")
    sections.register(ports)  # the same section again: start-up run twice
    clash = sections.Section(
        name="managers",
        payload_keys=("subnet_managers",),
        columns=("managers_digest",),
        key=lambda data: {},
        store=lambda node, data, now: {},
    )
    with pytest.raises(ValueError, match="clashes with ports"):
        sections.register(clash)
    assert len(sections.registered()) == 6


def test_the_inventory_imports_no_domain_app_and_no_app_imports_the_console() -> None:
    for path in (ROOT / "llmgw" / "inventory").rglob("*.py"):
        wrong = {n for n in imported(path) if n.split(".")[:2] in (["llmgw", o] for o in OTHERS)}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"
    for app in OTHERS:
        if app == "console":
            continue
        for path in (ROOT / "llmgw" / app).rglob("*.py"):
            wrong = {n for n in imported(path) if n.startswith("llmgw.console")}
            assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"
