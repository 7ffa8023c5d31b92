"""An engine's version is compared with its pin; where it cannot be (llama.cpp built
outside git says build 0), the check says that the sha256 is what pins it."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmgw_agent.doctor.gather import Facts, read_engines
from llmgw_agent.engines.verify import Marker, VerifyError, check_engine, local_runner


def _script(path: Path, said: str) -> Path:
    path.write_text(f"#!/bin/sh\necho '{said}' >&2\n")
    path.chmod(0o755)
    return path


def test_a_package_engine_that_says_another_version_is_refused(tmp_path: Path) -> None:
    vllm = _script(tmp_path / "vllm", "0.32.0")
    with pytest.raises(VerifyError) as refused:
        check_engine("vllm", vllm, local_runner(), "0.33.0")
    assert str(refused.value) == "vllm says it is vllm 0.32.0, but 0.33.0 was asked for"
    # A local label (a CUDA build) is the same release.
    labelled = _script(tmp_path / "vllm-cu", "0.33.0+cu124")
    assert check_engine("vllm", labelled, local_runner(), "0.33.0").version == "0.33.0+cu124"


def test_doctor_says_what_pins_a_build_0(tmp_path: Path) -> None:
    folder = tmp_path / "llama.cpp-b11434-package"
    folder.mkdir()
    said = "version: 0.6.0-dev (build 0, commit unknown)"
    _script(folder / "llama-server", said)
    Marker(
        engine="llama.cpp",
        version="b11434",
        platform="package",
        sha256="0" * 64,
        binary="llama-server",
        reported_version="0.6.0-dev (build 0, commit unknown)",
        commit="unknown",
        installed_at="2026-12-05T00:00:00Z",
    ).write(folder)
    facts = Facts()
    read_engines(tmp_path, [], facts)
    [engine] = facts.engines or []
    assert engine["ok"]
    assert engine["message"] == (
        "--version: 0.6.0-dev (build 0, commit unknown) (build 0 is llama.cpp built outside "
        "git, which cannot say its build number; the sha256 the catalog gives for b11434 is "
        "what pins it)"
    )
