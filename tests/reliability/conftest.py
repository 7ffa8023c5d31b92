from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.reliability.agent import NAMES
from tests.reliability.cluster import Cluster
from tests.reliability.figures import FIGURES


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("reliability figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


CATALOG = """
engines:
  llama.cpp:
    version: b11434
    default: true
models:
  - name: held-cpu
    source: hf://reliability/held-cpu
    always_running: 3
    profiles:
      - name: cpu
        memory_gb: 1
        cpu_cores: 1
        node_selector: {"llmgw.io/rack": r01}
  - name: held-gpu
    source: hf://reliability/held-gpu
    always_running: 2
    profiles:
      - name: gpu
        gpu_class: H100-80GB
        gpus_per_shard: 1
        memory_gb: 1
        cpu_cores: 1
"""
# Simulated fleets (prefix: nodes), each in one process, in rack r01; and
# the real agents' nodes (tests/reliability/agent.py).
FLEETS = {"a": 4, "b": 4}
NODES = sum(FLEETS.values()) + len(NAMES)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One production layout for every scenario; each leaves it settled."""
    layout = Cluster(tmp_path_factory.mktemp("cluster"), CATALOG)
    try:
        layout.start()
        for prefix, nodes in FLEETS.items():
            layout.start_fleet(prefix, nodes)
        layout.settle(NODES, 300)
        started = time.monotonic()
        while not layout.serving_tiny():
            assert time.monotonic() - started < 180, "the real agents' model never got ready"
            time.sleep(1)
        yield layout
    finally:
        layout.close()


@pytest.fixture(autouse=True)
def _brought_back(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each scenario, whatever it left down is started again, passed
    or failed: its failure is its own, not the next scenario's."""
    yield
    layout = request.node.funcargs.get("cluster")  # None: it never started
    if isinstance(layout, Cluster) and layout.restore():
        layout.settle(NODES, 180)
