"""server.yaml: applied whole or refused whole, with lines and keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.catalog import services
from llmgw.catalog.loader import CatalogError, parse
from llmgw.catalog.models import Engine, Model, Profile

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
engines:
  llama.cpp:
    version: b11434
models:
  - name: tiny
    source: hf://x/tiny
    always_running: 1
    profiles:
      - name: cpu
        memory_gb: 2
        cpu_cores: 2
"""


def test_the_shipped_example_is_applied(db):
    # A published example that has never been loaded is a guess (seed c1ac2f022f).
    counts = services.apply_file(ROOT / "deploy" / "server.example.yaml")
    assert counts["models"] == Model.objects.count() == 6
    tp8 = Profile.objects.get(model__name="llama-3.1-70b-instruct", name="tp8")
    assert (tp8.gpu_class, tp8.gpus_per_shard, tp8.tensor_parallel, tp8.engine) == (
        "H100-80GB",
        8,
        8,
        "vllm",
    )
    assert Engine.objects.get(name="llama.cpp").default


def test_errors_name_line_and_key_and_nothing_is_applied(db):
    services.apply_text(GOOD)
    bad = """
models:
  - name: tiny
    source: hf://x/tiny
    always_running: many
    profiles:
      - name: cpu
        memory_gb: 4
        gpus_per_shard: 2
        colour: red
  - name: newcpu
    source: hf://x/new
    profiles:
      - name: cpu
        cpu_cores: 4
"""
    with pytest.raises(CatalogError) as raised:
        services.apply_text(bad)
    errors = raised.value.errors
    assert (
        "line 5: models[0].always_running: expected a whole number of zero or more, got 'many'"
        in errors
    )
    assert any(e.startswith("line 10: models[0].profiles[0].colour: unknown key") for e in errors)
    assert any(
        e.startswith("line 7: models[0].profiles[0].gpus_per_shard: GPUs without a gpu_class")
        for e in errors
    )
    assert Profile.objects.get(model__name="tiny").memory_gb == 2
    assert Model.objects.get(name="tiny").always_running == 1


def test_a_new_cpu_model_must_declare_memory(db):
    bad = GOOD.replace("        memory_gb: 2\n", "")
    with pytest.raises(CatalogError) as raised:
        services.apply_text(bad)
    assert raised.value.errors == [
        "line 10: models[0].profiles[0].memory_gb: a new CPU model must declare the memory it needs"
    ]
    assert not Model.objects.exists()


def test_yaml_syntax_errors_name_the_line():
    with pytest.raises(CatalogError) as raised:
        parse("models:\n  - name: a\n   source: b\n")
    assert raised.value.errors[0].startswith("line 3: not valid YAML")


def test_an_unknown_engine_is_refused(db):
    with pytest.raises(CatalogError) as raised:
        services.apply_text(GOOD.replace("cpu_cores: 2", "cpu_cores: 2\n        engine: tgi"))
    assert "unknown engine 'tgi'" in raised.value.errors[0]


def test_bad_build_checksums_are_refused():
    text = """
engines:
  llama.cpp:
    version: b1
    builds:
      ubuntu-x64: {url: "https://example.invalid/a.tar.gz", sha256: "abc"}
"""
    with pytest.raises(CatalogError) as raised:
        parse(text)
    assert raised.value.errors == [
        "line 6: engines.llama.cpp.builds.ubuntu-x64.sha256: expected 64 hexadecimal digits"
    ]
