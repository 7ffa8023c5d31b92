"""docs/agent-protocol.md names every field of the protocol's structs, and
no field they lack: its field reference is what the structs write."""

from __future__ import annotations

from pathlib import Path

from llmgw_agent.protocol import reference

DOC = Path(__file__).parents[2] / "docs" / "agent-protocol.md"


def test_the_field_reference_is_what_the_structs_write() -> None:
    written = reference.section(DOC.read_text(encoding="utf-8"))
    assert written == reference.render(), (
        "docs/agent-protocol.md is out of date: run "
        "`python -m llmgw_agent.protocol.reference docs/agent-protocol.md`"
    )
