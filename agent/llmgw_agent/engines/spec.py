"""What the control plane asks for: an engine, its version, and a build per platform."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The binary each installable engine is run as; the others (vLLM, SGLang) are Python
# environments of several gigabytes, not an archive, and are named in agent.yaml instead.
BINARIES = {"llama.cpp": "llama-server"}


class SpecError(ValueError):
    """The desired engine list is malformed; the message names the field."""


@dataclass(frozen=True)
class Build:
    url: str
    sha256: str


@dataclass(frozen=True)
class EngineSpec:
    name: str
    version: str
    builds: dict[str, Build] = field(default_factory=dict)

    @property
    def binary(self) -> str | None:
        return BINARIES.get(self.name)

    @classmethod
    def parse(cls, raw: EngineSpec | Mapping[str, Any]) -> EngineSpec:
        """From the control plane's {name, version, builds: {platform: {url, sha256}}}."""
        if isinstance(raw, EngineSpec):
            return raw
        name, version = raw.get("name"), raw.get("version")
        if not isinstance(name, str) or not name:
            raise SpecError(f"engine name must be a non-empty string, got {name!r}")
        if not isinstance(version, str) or not version:
            raise SpecError(f"{name}: version must be a non-empty string, got {version!r}")
        builds: dict[str, Build] = {}
        for platform, build in (raw.get("builds") or {}).items():
            where = f"{name} {version} builds.{platform}"
            if not isinstance(build, Mapping):
                raise SpecError(f"{where}: expected {{url, sha256}}, got {build!r}")
            url, sha = build.get("url"), str(build.get("sha256", "")).lower()
            if not isinstance(url, str) or not url.startswith(("https://", "http://", "file://")):
                raise SpecError(f"{where}.url: expected an http(s):// or file:// URL, got {url!r}")
            if not _SHA256.match(sha):
                raise SpecError(f"{where}.sha256: expected 64 hexadecimal digits, got {sha!r}")
            builds[str(platform)] = Build(url, sha)
        return cls(name, version, builds)

    def folder_name(self, platform: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.name}-{self.version}-{platform}")
