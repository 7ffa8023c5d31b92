"""make check's tier (tests/tiers.py): a test that starts a server or a
subprocess, itself or through a helper or a tests.* import, is marked
`server` and left to make test; one that starts one unmarked fails there."""

from __future__ import annotations

import socket
import types
from pathlib import Path

import pytest

from tests import tiers

MODULE = """
import subprocess

from tests.inventory.test_gpus import join_with_gpus
from tests.payloads import heartbeat


def start():
    subprocess.run(["true"])


def helper():
    return start()


def test_direct():
    subprocess.run(["true"])


def test_through_a_helper():
    helper()


def test_through_an_import():
    join_with_gpus()


def test_pure():
    heartbeat("a")
"""


def test_a_test_is_marked_by_what_it_and_its_helpers_start(tmp_path: Path) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text(MODULE)
    starts = {
        name: tiers._starts(module, name, set())
        for name in ("test_direct", "test_through_a_helper", "test_through_an_import", "test_pure")
    }
    assert starts == {
        "test_direct": True,
        "test_through_a_helper": True,
        # join_with_gpus runs the agent's GPU collector, which runs a command
        "test_through_an_import": True,
        "test_pure": False,
    }


def test_the_fast_tier_refuses_a_process_or_a_listening_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    item = types.SimpleNamespace(nodeid="tests/x.py::test_y")
    tiers.guard(item, monkeypatch)  # type: ignore[arg-type]
    with pytest.raises(tiers.StartedInFastTier, match="tests/x.py::test_y starts a subprocess"):
        subprocess.run(["true"])
    with socket.socket() as s, pytest.raises(tiers.StartedInFastTier, match="listens"):
        s.bind(("127.0.0.1", 0))
        s.listen()
