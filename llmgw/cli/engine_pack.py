"""`llmgw engine pack`: make a release-shaped engine archive from a local
build, for a site whose nodes cannot reach the internet (and for the demo).

The archive looks like llama.cpp's own release assets: everything under a
top folder `llama-<version>/`, named `llama-<version>-bin-<platform>.tar.gz`,
so the agent installs it exactly as it would the upstream one. Prints the
`engines:` entry to put in server.yaml, with the archive's sha256.
"""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path


def pack(build_dir: Path, version: str, platform: str, out_dir: Path) -> tuple[Path, str]:
    if not (build_dir / "llama-server").is_file():
        raise FileNotFoundError(f"{build_dir}: no llama-server here")
    out_dir.mkdir(parents=True, exist_ok=True)
    top = f"llama-{version}"
    archive = out_dir / f"llama-{version}-bin-{platform}.tar.gz"
    partial = archive.with_suffix(".partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(build_dir, arcname=top, recursive=False)
        for entry in sorted(build_dir.iterdir()):
            tar.add(entry, arcname=f"{top}/{entry.name}")
    partial.replace(archive)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    return archive, digest


def engines_yaml(version: str, platform: str, url: str, sha256: str) -> str:
    return (
        "engines:\n  llama.cpp:\n"
        f"    version: {version}\n    default: true\n    builds:\n"
        f'      {platform}: {{url: "{url}", sha256: "{sha256}"}}\n'
    )


def main(argv: list[str]) -> int:
    import argparse

    # The docstring's first paragraph whole: its first line alone stopped
    # mid-sentence ("from a local").
    first = " ".join(__doc__.split("\n\n")[0].split()).removeprefix("`llmgw engine pack`: ")
    parser = argparse.ArgumentParser(
        prog="llmgw engine pack", description=first[:1].upper() + first[1:]
    )
    parser.add_argument(
        "build_dir", type=Path, nargs="?", help="folder holding llama-server and its libraries"
    )
    parser.add_argument("--version", help="the build tag, e.g. b11434")
    parser.add_argument(
        "--platform",
        default="ubuntu-x64",
        help="the platform the build runs on, as server.yaml's builds: name it (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write into")
    parser.add_argument("--url-base", default="", help="where the archive will be served from")
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        metavar="SERVER_YAML",
        help="instead: the wheels of every engine package SERVER_YAML names, into OUT/wheels",
    )
    args = parser.parse_args(argv)
    if args.wheelhouse is not None:
        return _wheelhouse(args.wheelhouse, args.out, args.url_base)
    if args.build_dir is None or not args.version:
        parser.error("a build folder and --version are needed (or --wheelhouse SERVER_YAML)")
    archive, digest = pack(args.build_dir, args.version, args.platform, args.out)
    url = (
        f"{args.url_base.rstrip('/')}/{archive.name}"
        if args.url_base
        else archive.resolve().as_uri()
    )
    print(engines_yaml(args.version, args.platform, url, digest), end="")
    return 0


def _wheelhouse(catalog: Path, out: Path, url_base: str) -> int:
    import sys

    import yaml

    from llmgw.cli.engine_wheelhouse import WheelhouseError, wheelhouse

    try:
        entries = wheelhouse(catalog, out, url_base)
    except WheelhouseError as exc:
        print(f"llmgw engine pack: {exc}", file=sys.stderr)
        return 1
    print(yaml.safe_dump(entries, sort_keys=False, width=1000), end="")
    return 0
