"""Install one engine build: packages, download, checksum, unpack, ldd, --version, marker.

The marker is written last and only after the binary ran: a folder without one is not
installed, whatever else is in it. Every step is bounded (InstallLimits), so an install
always ends, installed or failed with the reason.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from ..collectors import CommandRunner
from .archive import (
    MAX_MEMBERS,
    MAX_UNPACKED_BYTES,
    ArchiveError,
    DamagedArchiveError,
    archive_root,
    unpack,
)
from .download import (
    CONNECT_S,
    DEADLINE_S,
    READ_S,
    DownloadError,
    DownloadLimits,
    Progress,
    download,
    filename_of,
)
from .packages import PackageError, PackageManager, ensure_packages, packages_for
from .platform import parse_platform
from .pypackage import PIP_DEADLINE_S, PackageInstallError, install_package
from .spec import PACKAGE, EngineSpec
from .verify import MARKER, Marker, VerifyError, VersionInfo, check_engine, check_llama_server

log = logging.getLogger("llmgw_agent.engines")

DOWNLOADS = ".downloads"


class InstallError(Exception):
    """The install failed; the message is what the node reports."""


@dataclass(frozen=True)
class InstallLimits:
    """How long each step may take and how much it may write."""

    connect_s: float = CONNECT_S
    read_s: float = READ_S  # no byte for this long: the download has stalled
    download_s: float = DEADLINE_S  # the whole download, however slowly it trickles
    # Unpacked bytes (agent.yaml engines_max_unpacked_gib); bounds the download as well,
    # as no archive of a release is much larger than what it unpacks to.
    unpacked_bytes: int = MAX_UNPACKED_BYTES
    members: int = MAX_MEMBERS
    version_s: float = 30.0  # ldd, and the binary's --version
    package_s: float = PIP_DEADLINE_S  # pip install of a package source, builds included

    def download_limits(self) -> DownloadLimits:
        return DownloadLimits(
            connect_s=self.connect_s,
            read_s=self.read_s,
            deadline_s=self.download_s,
            max_bytes=self.unpacked_bytes,
        )


@dataclass(frozen=True)
class Installed:
    folder: Path
    binary: Path
    marker: Marker
    info: VersionInfo


def find_binary(root: Path, name: str) -> Path | None:
    """`name` at the archive's top, else in build/bin/ or bin/, else the shallowest match."""
    for candidate in (root / name, root / "build" / "bin" / name, root / "bin" / name):
        if candidate.is_file():
            return candidate
    found = sorted(root.rglob(name), key=lambda p: len(p.parts))
    return next((p for p in found if p.is_file()), None)


def install(
    spec: EngineSpec,
    platform: str,
    *,
    engines_dir: Path,
    run_local: CommandRunner,
    run_packages: CommandRunner | None = None,
    package_manager: PackageManager | None = None,
    progress: Progress = lambda _: None,
    client: httpx.Client | None = None,
    stop: threading.Event | None = None,
    limits: InstallLimits = InstallLimits(),
) -> Installed:
    """Raises InstallError, with the reason to report, for anything that goes wrong."""
    binary_name = spec.binary
    if binary_name is None:
        raise InstallError(
            f"{spec.name} is not installed by the agent: name it under engines: in agent.yaml"
        )
    build = spec.builds.get(platform)
    parsed = parse_platform(platform)
    if build is None or parsed is None:
        raise InstallError(f"{spec.name} {spec.version} offers no build {platform!r}")
    engines_dir.mkdir(parents=True, exist_ok=True)

    if package_manager is not None and run_packages is not None:
        wanted = packages_for(parsed, package_manager)
        _ensure_packages(spec.name, wanted, run_packages, package_manager, progress)

    name = filename_of(build.url)
    try:
        archive = download(
            build.url,
            engines_dir / DOWNLOADS,
            sha256=build.sha256,
            progress=progress,
            client=client,
            stop=stop,
            limits=limits.download_limits(),
        )
    except DownloadError as exc:
        raise InstallError(str(exc)) from exc

    staging = Path(
        tempfile.mkdtemp(prefix=f".staging-{spec.folder_name(platform)}-", dir=engines_dir)
    )
    try:
        _unpack(archive, name, staging, limits, progress)
        binary = find_binary(archive_root(staging), binary_name)
        if binary is None:
            raise InstallError(f"{name} holds no {binary_name}")
        progress(f"checking {binary_name}: ldd, then {binary_name} --version")
        try:
            info = check_llama_server(binary, run_local, spec.version)
        except VerifyError as exc:
            raise InstallError(str(exc)) from exc
        folder = engines_dir / spec.folder_name(platform)
        marker = Marker(
            engine=spec.name,
            version=spec.version,
            platform=platform,
            sha256=build.sha256,
            binary=str(binary.relative_to(staging)),
            reported_version=info.describe(),
            commit=info.commit,
            installed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        _put_in_place(staging, folder, marker)
        return Installed(folder, folder / marker.binary, marker, info)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def install_from_package(
    spec: EngineSpec,
    *,
    engines_dir: Path,
    run_local: CommandRunner,
    progress: Progress = lambda _: None,
    stop: threading.Event | None = None,
    limits: InstallLimits = InstallLimits(),
) -> Installed:
    """The engine's pinned package into its own virtualenv, then the same --version check."""
    package = spec.package
    if package is None:
        raise InstallError(f"{spec.name} {spec.version} names no package to install")
    folder = engines_dir / spec.folder_name(PACKAGE)
    engines_dir.mkdir(parents=True, exist_ok=True)
    try:
        binary = install_package(
            spec, folder, progress=progress, stop=stop, deadline_s=limits.package_s
        )
        progress(f"checking {binary.name} --version")
        info = check_engine(spec.name, binary, run_local, spec.version)
    except (PackageInstallError, VerifyError, OSError) as exc:
        # A failed environment can be gigabytes (vLLM's torch): it goes, as a failed
        # archive's staging does.
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, OSError):
            raise InstallError(f"cannot install into {folder}: {exc.strerror or exc}") from exc
        raise InstallError(str(exc)) from exc
    marker = Marker(
        engine=spec.name,
        version=spec.version,
        platform=PACKAGE,
        sha256=package.sha256,
        binary=str(binary.relative_to(folder)),
        reported_version=info.describe(),
        commit=info.commit,
        installed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    marker.write(folder)
    return Installed(folder, binary, marker, info)


def _ensure_packages(
    engine: str,
    wanted: list[str],
    run_packages: CommandRunner,
    package_manager: PackageManager,
    progress: Progress,
) -> None:
    progress(f"checking OS packages ({', '.join(wanted)})")
    try:
        added = ensure_packages(run_packages, package_manager, wanted)
    except PackageError as exc:
        raise InstallError(str(exc)) from exc
    if added:
        log.info("installed OS packages for %s: %s", engine, " ".join(added))


def _unpack(
    archive: Path, name: str, staging: Path, limits: InstallLimits, progress: Progress
) -> None:
    """Unpack the downloaded archive into `staging`; the archive goes either way."""
    progress(f"unpacking {name}")
    try:
        unpack(archive, staging, max_bytes=limits.unpacked_bytes, max_members=limits.members)
    except DamagedArchiveError as exc:
        # The sha256 matched, so this is the file the control plane was told of.
        raise InstallError(
            f"{name}: damaged archive: {exc}; it matched its sha256, so the file published is bad"
        ) from exc
    except ArchiveError as exc:
        raise InstallError(f"{name}: {exc}") from exc
    except OSError as exc:
        raise InstallError(
            f"cannot unpack {name} into {staging.parent}: {exc.strerror or exc}"
        ) from exc
    finally:
        archive.unlink(missing_ok=True)


def _put_in_place(staging: Path, folder: Path, marker: Marker) -> None:
    """The checked build becomes the engine's folder, marked last."""
    if folder.exists():
        # Whatever is there carries no marker we trust (else nobody would install).
        shutil.rmtree(folder)
    staging.rename(folder)
    marker.write(folder)


def recheck(folder: Path, run_local: CommandRunner) -> Installed:
    """Is a marked folder still installed? ldd and --version again, against the marker."""
    marker = Marker.read(folder)
    if marker is None:
        raise InstallError(f"{folder} has no readable {MARKER}")
    binary = folder / marker.binary
    try:
        info = check_engine(marker.engine, binary, run_local, marker.version)
    except VerifyError as exc:
        raise InstallError(str(exc)) from exc
    if info.describe() != marker.reported_version:
        raise InstallError(
            f"{binary.name} now says it is {info.describe()}; "
            f"{marker.reported_version} was installed"
        )
    return Installed(folder, binary, marker, info)


def demote(folder: Path) -> None:
    """Not installed any more: the marker goes, so nothing (not even a restart) trusts it."""
    (folder / MARKER).unlink(missing_ok=True)


def installed_folders(engines_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in engines_dir.iterdir() if (p / MARKER).is_file())
    except OSError:
        return []
