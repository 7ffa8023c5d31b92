"""`llmgw ctl nodes|status|explain` against a live server and a fleet
written straight into the database: the filters are the server's, the
list pages through, and explain counts the nodes of each reason unless
asked for all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmgw.cli import ctl, ctl_nodes
from tests import bulk_fleet
from tests.inventory.test_ctl import columns, run

pytestmark = pytest.mark.django_db(transaction=True)

COUNT = 60  # racks r000 (H100), r001 (A100), r002 (L40S) of 20


@pytest.fixture
def fleet(ctl_env):
    return bulk_fleet.build(COUNT)


@pytest.fixture
def ctl_env(live_server, operator, monkeypatch, tmp_path):
    from tests.tokens import make_token

    monkeypatch.setenv("LLMGW_URL", live_server.url)
    monkeypatch.setenv("LLMGW_TOKEN", make_token(operator))
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "absent.yaml"))


def listed(capsys, *flags):
    code, out, err = run(capsys, "nodes", *flags)
    assert code == 0, err
    return out, columns(out)


def test_ctl_nodes_pages_through_the_whole_fleet(fleet, capsys, monkeypatch):
    monkeypatch.setattr(ctl_nodes, "PAGE", 7)  # nine pages of 7 (the last of 4)
    out, rows = listed(capsys)
    assert list(rows) == sorted(fleet)
    assert rows["node-00045"]["GPUS"] == "8xL40S-48GB"
    assert rows["node-00045"]["LOCATION"] == "fra1/hall1/row00/r002:r002-pdu0"
    assert rows["node-00007"]["STATE"] == "NotReady"
    assert rows["node-00005"]["STATE"] == "Ready,Cordoned"
    # The node's own words for an engine not installed, under the table.
    assert "node-00013: llama.cpp b11434: installing: downloading" in out
    # Pages after the first are asked for together; the table keeps their order.
    out, rows = listed(capsys, "--limit", "20")
    assert list(rows) == sorted(fleet)[:20] and f"20 of {COUNT} nodes shown (--limit)" in out


def test_ctl_nodes_filters_on_the_server(fleet, capsys):
    _, rows = listed(capsys, "--domain", "rack=r001", "--class", "A100-40GB")
    assert list(rows) == [bulk_fleet.name_of(i) for i in range(20, 40)]
    _, rows = listed(
        capsys, "--domain", "rack=r000", "--domain", "rack=r002", "--state", "NotReady"
    )
    assert list(rows) == ["node-00007", "node-00057"]
    _, rows = listed(capsys, "--state", "Cordoned")
    assert list(rows) == ["node-00005"]
    _, rows = listed(capsys, "--search", "0003", "--domain", "pdu=r001-pdu1")
    assert list(rows) == [bulk_fleet.name_of(i) for i in range(30, 40)]
    out, rows = listed(capsys, "--limit", "5")
    assert list(rows) == sorted(fleet)[:5] and f"5 of {COUNT} nodes shown (--limit)" in out
    code, out, _ = run(capsys, "nodes", "--class", "B200")
    assert code == 0 and out.strip() == "no nodes match"


def test_ctl_nodes_says_which_filter_the_server_refused(fleet, capsys):
    code, _, err = run(capsys, "nodes", "--state", "Redy")
    assert code == 1 and "HTTP 400: state: 'Redy': one of Ready, NotReady, Cordoned" in err
    code, _, err = run(capsys, "nodes", "--domain", "bay=4")
    assert code == 1 and "domain: 'bay' is not a level" in err
    with pytest.raises(SystemExit):
        ctl.main(["nodes", "--limit", "0"])
    assert "--limit: a whole number from 1" in capsys.readouterr().err


def test_ctl_status_counts_on_the_server(fleet, capsys):
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert f"nodes     {COUNT} ({COUNT - 2} Ready, 2 NotReady, 1 cordoned)" in out
    # The silent nodes' cards (node-00007's H100s, node-00057's L40Ss) are
    # counted apart, as the nodes are: they may be gone with their node.
    assert (
        "gpus      160xA100-40GB, 152xH100-80GB Ready + 8 NotReady, "
        "152xL40S-48GB Ready + 8 NotReady"
    ) in out, out
    assert "weights   llama-3.1-8b on 20 node(s)" in out
    _, out, _ = run(capsys, "status", "--domain", "rack=r001")
    assert "nodes     20 (20 Ready, 0 NotReady, 0 cordoned)" in out
    assert "gpus      160xA100-40GB" in out


def test_ctl_explain_groups_nodes_by_reason_unless_asked_for_all(fleet, capsys):
    from llmgw.catalog import services as catalog

    catalog.apply_text(
        "models:\n  - name: big\n    source: hf://x/big\n    profiles:\n"
        "      - name: b200\n        gpu_class: B200\n        gpus_per_shard: 8\n"
        "        memory_gb: 8\n"
    )
    code, out, err = run(capsys, "explain", "big")
    assert code == 0, err
    # 55 nodes have no B200; five are refused earlier (cordoned, silent, installing):
    # each reason once, its nodes counted, three named and one node's own words.
    assert (
        "  55 nodes: no GPU of the class (no_gpu_of_class): "
        "node-00000, node-00001, node-00002 and 52 more\n"
    ) in out, out
    assert [line for line in out.splitlines() if line.startswith("    node-")] == []
    assert "every node on a line of its own: llmgw ctl explain big --all" in out
    code, out, _ = run(capsys, "explain", "big", "--all")
    named = [line for line in out.splitlines() if line.startswith("    node-")]
    assert code == 0 and len(named) == COUNT and "more" not in out


def test_ctl_loads_neither_django_nor_celery():
    """What made a ctl command take a second before it sent anything."""
    code = (
        "import sys; from llmgw.cli import ctl; "
        "print(sorted(m for m in ('django', 'celery', 'kombu', 'rest_framework') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
