"""Does an unpacked engine run here? ldd names a missing library; `--version` proves the rest.

Both run the files directly as the agent's own user (no command_wrapper): the agent starts
the engine the same way, so that is the run that has to work.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..collectors import CommandResult, CommandRunner

MARKER = ".llmgw-installed.json"
# llama-server --version prints one of (on stderr, then "built with GNU 12.2.0 for Linux x86_64"):
#   "version: 11434 (3f2a9c1)"                         releases before the semver scheme
#   "version: 0.6.0-dev (build 11434, commit 3f2a9c1)"  b11434 itself; built outside git
#                                                       (an sdist) it says build 0, unknown
_LLAMA_VERSION_NEW = re.compile(r"version:\s*(\S+)\s*\(build\s+(\d+),\s*commit\s+([^)\s]+)\)")
_LLAMA_VERSION_OLD = re.compile(r"version:\s*(\d+)\s*\(([^)\s]*)\)")
_ANY_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)*(?:[-+.][0-9A-Za-z.+-]*)?)\b")
_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found\s*$")
_BUILD = re.compile(r"^b(\d+)$")


class VerifyError(Exception):
    """The engine does not run here; the message says why in the node's own words."""


@dataclass(frozen=True)
class VersionInfo:
    version: str  # "0.6.0-dev" or (older llama.cpp) "11434"; "0.6.3" for vLLM
    commit: str | None = None
    build: str | None = None  # llama.cpp's build number: the N of release tag bN

    def describe(self) -> str:
        if self.build is not None and self.build != self.version:
            return f"{self.version} (build {self.build}, commit {self.commit})"
        return f"{self.version} ({self.commit})" if self.commit else self.version


def local_runner(timeout_s: float = 30.0) -> CommandRunner:
    """Runs a command of the engine's, killing all of it when it takes too long.

    The command runs in a session of its own, and on a timeout the whole process group
    is killed: an engine's `--version` may be a launcher script, and killing only the
    script (as subprocess.run does) would leave its hung child running for good, one
    more with every retry.
    """

    def run(argv: Sequence[str]) -> CommandResult:
        with subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    # A child that left the group could still hold the pipes open:
                    # stop waiting for it rather than hang here instead.
                    proc.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                raise subprocess.TimeoutExpired(list(argv), timeout_s) from None
            return CommandResult(proc.returncode, stdout, stderr)

    return run


def shared_objects(folder: Path) -> list[Path]:
    """The engine's own libraries beside its binary: libllama.so, libggml-cpu-haswell.so..."""
    return sorted(
        p
        for p in folder.iterdir()
        if ".so" in p.name and p.name.startswith("lib") and p.is_file() and not p.is_symlink()
    )


def missing_libraries(binary: Path, run: CommandRunner) -> list[tuple[str, str]]:
    """(library, needed by) for every `=> not found` ldd prints for the binary and its .so."""
    missing: dict[str, list[str]] = {}
    for target in [binary, *shared_objects(binary.parent)]:
        try:
            result = run(["ldd", str(target)])
        except (OSError, subprocess.SubprocessError):
            # No ldd (a minimal image): --version still proves whether it runs.
            return []
        for line in result.stdout.splitlines():
            match = _NOT_FOUND.match(line)
            if match:
                missing.setdefault(match.group(1), []).append(target.name)
    return [(lib, ", ".join(sorted(set(by)))) for lib, by in sorted(missing.items())]


def check_libraries(binary: Path, run: CommandRunner) -> None:
    missing = missing_libraries(binary, run)
    if missing:
        raise VerifyError(
            "; ".join(f"missing library {lib} (needed by {by})" for lib, by in missing)
        )


def _tail(text: str, limit: int = 400) -> str:
    text = " / ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else "..." + text[-limit:]


def run_version(binary: Path, run: CommandRunner, args: Sequence[str] = ("--version",)) -> str:
    """The output of `binary --version`; refuse with that output when it does not run."""
    argv = [str(binary), *args]
    shown = f"{binary.name} {' '.join(args)}"
    try:
        result = run(argv)
    except subprocess.TimeoutExpired as exc:
        raise VerifyError(f"{shown} did not finish within {exc.timeout:.0f} s") from exc
    except OSError as exc:
        raise VerifyError(f"{shown} cannot run: {exc.strerror or exc}") from exc
    output = "\n".join(s for s in (result.stdout, result.stderr) if s.strip())
    if result.returncode != 0:
        raise VerifyError(
            f"{shown} failed with exit status {result.returncode}: {_tail(output) or 'no output'}"
        )
    return output


def parse_llama_version(output: str) -> VersionInfo | None:
    new = _LLAMA_VERSION_NEW.search(output)
    if new:
        return VersionInfo(new.group(1), new.group(3), new.group(2))
    old = _LLAMA_VERSION_OLD.search(output)
    return VersionInfo(old.group(1), old.group(2), old.group(1)) if old else None


def parse_any_version(output: str) -> VersionInfo | None:
    match = _ANY_VERSION.search(output)
    return VersionInfo(match.group(1)) if match else None


def check_llama_server(binary: Path, run: CommandRunner, wanted: str | None) -> VersionInfo:
    """ldd, then --version; the build number must be the one asked for ("b11434")."""
    check_libraries(binary, run)
    output = run_version(binary, run)
    info = parse_llama_version(output)
    if info is None:
        raise VerifyError(f"{binary.name} --version printed no version: {_tail(output)}")
    build = _BUILD.match(wanted or "")
    # Build 0 is a tree built outside git: it cannot say which build it is, so it is not
    # taken for a wrong one. The sha256 already pinned the archive.
    if build and info.build not in (None, "0") and build.group(1) != info.build:
        raise VerifyError(
            f"{binary.name} says it is build {info.build}, but {wanted} was asked for"
        )
    return info


# How a package-installed engine says its version. SGLang has no command of its own: its
# server is a module, and importing it is the check that the environment works.
VERSION_ARGS = {"sglang": ("-c", "import sglang; print(sglang.__version__)")}


def check_engine(engine: str, binary: Path, run: CommandRunner, wanted: str | None) -> VersionInfo:
    """llama-server as check_llama_server does; any other engine by its version output,
    which must be the version asked for (a local label such as "+cu124" aside)."""
    if engine == "llama.cpp":
        return check_llama_server(binary, run, wanted)
    args = VERSION_ARGS.get(engine, ("--version",))
    output = run_version(binary, run, args)
    info = parse_any_version(output)
    if info is None:
        raise VerifyError(f"{binary.name} {args[0]} printed no version: {_tail(output)}")
    if wanted and info.version.split("+")[0] != wanted:
        raise VerifyError(
            f"{binary.name} says it is {engine} {info.version}, but {wanted} was asked for"
        )
    return info


def pinned_by(info: VersionInfo, wanted: str | None) -> str:
    """Why a version that cannot be compared with its pin is taken for it, in words;
    "" where the version printed is the pin itself."""
    if wanted and info.build == "0":
        return (
            f"build 0 is llama.cpp built outside git, which cannot say its build number; "
            f"the sha256 the catalog gives for {wanted} is what pins it"
        )
    return ""


@dataclass(frozen=True)
class Marker:
    engine: str
    version: str
    platform: str
    sha256: str
    binary: str  # relative to the install directory
    reported_version: str
    commit: str | None
    installed_at: str

    @classmethod
    def read(cls, folder: Path) -> Marker | None:
        try:
            data: Any = json.loads((folder / MARKER).read_text(encoding="utf-8"))
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, folder: Path) -> None:
        """Atomically: a crash leaves either no marker or a whole one, never half of one."""
        fd, tmp = tempfile.mkstemp(prefix=f"{MARKER}.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(asdict(self), f, indent=2, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, folder / MARKER)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
