"""`llmgw engine pack --wheelhouse`: an air-gapped site's mirror, and a node installing
from it with nothing else to reach. pip builds the wheels for real; the sdist carries its
own few-line build backend, so no index is needed to build it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml
from llmgw_agent.engines.installer import install_from_package
from llmgw_agent.engines.spec import EngineSpec
from llmgw_agent.engines.verify import local_runner

from llmgw.cli.engine_pack import main as engine_pack
from tests.agent.engine_helpers import file_server
from tests.agent.wheels import make_sdist

VERSION = "0.5.23"


@pytest.fixture(autouse=True)
def _offline_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for key in [k for k in os.environ if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(key)
    # The "index" the site's build machine reaches: a folder holding the sdist.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    return tmp_path


def test_the_wheelhouse_adds_built_wheels_and_a_node_installs_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {"sglang/__init__.py": f'__version__ = "{VERSION}"\n'}
    sdist = make_sdist(tmp_path / "index", "sglang", VERSION, files)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    catalog = tmp_path / "server.yaml"
    catalog.write_text(
        "engines:\n  sglang:\n    version: 0.5.23\n    default: true\n    package:\n"
        f'      needs: nvidia\n      requirements: ["sglang==0.5.23 --hash=sha256:{digest}"]\n'
    )
    mirror = tmp_path / "mirror"
    with file_server(mirror) as url:
        args = ["--wheelhouse", str(catalog), "--out", str(mirror), "--url-base", url]
        assert engine_pack(args) == 0
        printed = yaml.safe_load(capsys.readouterr().out)["engines"]["sglang"]
        [wheel] = (mirror / "wheels").glob("*.whl")
        built = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert printed["mirror"] == url
        assert printed["package"]["needs"] == "nvidia"
        assert printed["package"]["requirements"] == [
            f"sglang==0.5.23 --hash=sha256:{digest} --hash=sha256:{built}"
        ]
        # The node: only the mirror (PIP_FIND_LINKS is the build machine's, not its).
        os.environ.pop("PIP_FIND_LINKS")
        spec = EngineSpec.parse({"name": "sglang", **printed})
        found = install_from_package(
            spec, engines_dir=tmp_path / "node", run_local=local_runner(60)
        )
    assert found.info.version == VERSION


def test_a_catalog_without_packages_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "server.yaml"
    catalog.write_text("engines:\n  llama.cpp:\n    version: b11434\n")
    assert engine_pack(["--wheelhouse", str(catalog), "--out", str(tmp_path / "m")]) == 1
    assert capsys.readouterr().err == f"llmgw engine pack: {catalog}: no engine names a package\n"
