"""A catalog applied again keeps the held counts changed at run time unless
the file changed them, and says what it changed."""

from __future__ import annotations

from pathlib import Path

from llmgw.catalog import services
from llmgw.catalog.models import Model
from llmgw.cli.server import catalog_command
from llmgw.serving import services as serving

FILE = """
models:
  - name: tiny
    source: hf://x/tiny
    always_running: {always}
    under_load: 4
    profiles:
      - name: cpu
        memory_gb: {memory}
        cpu_cores: 2
"""


def _counts(name: str = "tiny") -> tuple[int, int]:
    model = Model.objects.get(name=name)
    return model.always_running, model.under_load


def test_counts_set_at_run_time_survive_the_same_file(db):
    services.apply_text(FILE.format(always=1, memory=2))
    # The operator scales at run time: down to none held, a higher ceiling.
    serving.set_counts("tiny", 0, 6)
    again = services.apply_text(FILE.format(always=1, memory=2))
    assert _counts() == (0, 6)
    assert again["changes"] == [
        "model tiny: always_running kept at 0, as set at run time (the file says 1, "
        "unchanged; to take it: llmgw ctl model scale tiny --always-running 1)",
        "model tiny: under_load kept at 6, as set at run time (the file says 4, "
        "unchanged; to take it: llmgw ctl model scale tiny --under-load 4)",
    ]


def test_a_count_the_file_changed_is_taken(db):
    services.apply_text(FILE.format(always=1, memory=2))
    serving.set_counts("tiny", 0, 6)
    edited = services.apply_text(FILE.format(always=3, memory=2))
    # always_running was edited in the file: the file's word is the newer one.
    # under_load was not: the run-time 6 stands.
    assert _counts() == (3, 6)
    assert "model tiny: always_running 0 -> 3 (the file changed it from 1)" in edited["changes"]


def test_a_count_kept_below_a_changed_ceiling_raises_it(db):
    services.apply_text(FILE.format(always=1, memory=2))
    serving.set_counts("tiny", 0, 0)
    Model.objects.filter(name="tiny").update(always_running=5)
    services.apply_text(FILE.format(always=1, memory=2).replace("under_load: 4", "under_load: 2"))
    assert _counts() == (5, 5)


def test_the_example_catalog_reapplied_keeps_what_placement_held(db):
    example = Path(__file__).resolve().parents[2] / "deploy" / "server.example.yaml"
    services.apply_file(example)
    # What a placement by hand stores (serving.storing's HELD statement):
    # always_running raised to the replicas that run, the ceiling with it.
    Model.objects.filter(name="qwen2.5-7b-instruct").update(always_running=3, under_load=3)
    Model.objects.filter(name="deepseek-r1-671b-cpu").update(always_running=1)
    services.apply_file(example)
    assert _counts("qwen2.5-7b-instruct") == (3, 3)
    assert _counts("deepseek-r1-671b-cpu")[0] == 1


def test_apply_prints_what_it_changed(db, tmp_path, capsys):
    path = tmp_path / "server.yaml"
    path.write_text(FILE.format(always=1, memory=2))
    assert catalog_command(str(path)) == 0
    out = capsys.readouterr().out
    assert "model tiny: added (always_running 1, under_load 4)" in out
    assert catalog_command(str(path)) == 0
    assert "no model, profile or engine changed" in capsys.readouterr().out
    path.write_text(FILE.format(always=1, memory=3))
    assert catalog_command(str(path)) == 0
    assert "model tiny: profile cpu: memory_gb changed" in capsys.readouterr().out
    path.write_text(FILE.format(always=1, memory=3).replace("name: cpu", "name: cpu2"))
    assert catalog_command(str(path)) == 0
    out = capsys.readouterr().out
    assert "model tiny: profile cpu2 added" in out and "model tiny: profile cpu removed" in out
