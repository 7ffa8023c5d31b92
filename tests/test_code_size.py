"""Files stay small enough to read whole and functions short enough to
hold in one's head: no function over 80 lines and no module over 500 in
the product and the agent (migrations are generated, and left out)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION = 80
MAX_MODULE = 500


def sources() -> list[Path]:
    files = [*(ROOT / "llmgw").rglob("*.py"), *(ROOT / "agent" / "llmgw_agent").rglob("*.py")]
    return sorted(p for p in files if "migrations" not in p.parts)


def test_no_module_is_longer_than_500_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources()
        if (n := p.read_text().count("\n")) > MAX_MODULE
    }
    assert not long, f"split these modules (lines): {long}"


def test_no_function_is_longer_than_80_lines() -> None:
    long = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"split these functions (lines): {long}"
