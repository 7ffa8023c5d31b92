"""filesystems and weights: the rules of 753f4e3265 and c13c567cc5."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmgw_agent.collectors import Roots
from llmgw_agent.collectors.filesystems import collect_filesystems
from llmgw_agent.collectors.mounts import find_mount, is_shared, mount_table, parse_mountinfo
from llmgw_agent.collectors.weights import collect_weights

from tests.agent.helpers import FakeStatfs, write_mountinfo

GiB = 2**30


def _roots(base: Path, dirs: list[Path], mounts: list[tuple[str, str, str, str]]) -> Roots:
    stats = {
        "local": FakeStatfs(f_bavail=600 * GiB // 4096, f_blocks=1000 * GiB // 4096),
        "filer": FakeStatfs(f_bavail=5 * 2**40 // 4096, f_blocks=9 * 2**40 // 4096),
    }

    def statfs(path: str) -> FakeStatfs:
        return stats["filer" if "/nfs" in path or "/lustre" in path else "local"]

    return Roots(
        model_dirs=tuple(str(d) for d in dirs),
        mounts=write_mountinfo(base / "mountinfo", mounts),
        statfs=statfs,
    )


def test_two_dirs_on_one_filesystem_are_one_entry(real_tmp: Path) -> None:
    data = real_tmp / "data"
    (data / "models").mkdir(parents=True)
    (data / "hf").mkdir()
    roots = _roots(
        real_tmp, [data / "models", data / "hf"], [("259:1", str(data), "ext4", "/dev/nvme0n1p1")]
    )
    assert collect_filesystems(roots)["filesystems"] == [
        {
            "mount": str(data),
            "device": "/dev/nvme0n1p1",
            "fstype": "ext4",
            "shared": False,
            "free_bytes": 600 * GiB,
            "total_bytes": 1000 * GiB,
            "dirs": [str(data / "models"), str(data / "hf")],
        }
    ]


def test_bind_mounts_of_one_disk_are_one_entry_and_tmpfs_twice_is_two(real_tmp: Path) -> None:
    dirs = [real_tmp / n for n in ("a", "b", "t1", "t2")]
    for d in dirs:
        d.mkdir()
    roots = _roots(
        real_tmp,
        dirs,
        [
            ("259:1", str(dirs[0]), "ext4", "/dev/nvme0n1p1"),
            ("259:1", str(dirs[1]), "ext4", "/dev/nvme0n1p1"),
            ("0:40", str(dirs[2]), "tmpfs", "tmpfs"),
            ("0:41", str(dirs[3]), "tmpfs", "tmpfs"),
        ],
    )
    entries = collect_filesystems(roots)["filesystems"]
    assert [e["dirs"] for e in entries] == [
        [str(dirs[0]), str(dirs[1])],
        [str(dirs[2])],
        [str(dirs[3])],
    ]


@pytest.mark.parametrize(
    ("fstype", "source"),
    [
        ("nfs4", "filer:/export/models"),
        ("lustre", "10.0.0.1@o2ib:/fs"),
        ("fuse.juicefs", "JuiceFS:models"),
        ("fuse.sshfs", "me@host:/m"),
        ("cephfs", "10.0.0.2:/"),
    ],
)
def test_network_filesystems_are_shared(real_tmp: Path, fstype: str, source: str) -> None:
    local, remote = real_tmp / "local", real_tmp / "nfs"
    local.mkdir()
    remote.mkdir()
    (remote / "qwen").mkdir()
    (remote / "qwen" / "model.safetensors").write_bytes(b"x" * 10)
    roots = _roots(
        real_tmp,
        [local, remote],
        [("259:1", str(local), "xfs", "/dev/sda1"), ("0:50", str(remote), fstype, source)],
    )
    entries = collect_filesystems(roots)["filesystems"]
    assert [(e["fstype"], e["shared"]) for e in entries] == [("xfs", False), (fstype, True)]
    assert entries[1]["free_bytes"] == 5 * 2**40
    models = collect_weights(roots)["weights"]["models"]
    assert models == [{"name": "qwen", "path": str(remote / "qwen"), "shared": True}]


def test_shared_classification() -> None:
    for fstype in ("nfs", "nfs4", "lustre", "cifs", "smb3", "ceph", "gpfs", "beegfs", "9p"):
        assert is_shared(fstype), fstype
    for fstype in ("ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "fuseblk"):
        # Local read as shared would make a model look present on every node.
        assert not is_shared(fstype), fstype


def test_missing_directory_is_skipped_not_full(real_tmp: Path) -> None:
    present = real_tmp / "present"
    present.mkdir()
    roots = _roots(
        real_tmp,
        [real_tmp / "unmounted-filer", present],
        [("259:1", str(present), "ext4", "/dev/sda1")],
    )
    entries = collect_filesystems(roots)["filesystems"]
    assert [e["dirs"] for e in entries] == [[str(present)]]
    only_missing = _roots(real_tmp, [real_tmp / "unmounted-filer"], [])
    assert collect_filesystems(only_missing) == {}


def test_no_model_dirs_sends_no_filesystems_key() -> None:
    assert collect_filesystems(Roots(model_dirs=())) == {}


def test_mountinfo_escapes_and_last_mount_wins() -> None:
    text = (
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "2 1 0:50 / /srv/my\\040models rw - nfs4 filer:/m rw\n"
        "3 1 0:51 / /srv/my\\040models rw - lustre mgs@o2ib:/fs rw\n"
    )
    table = parse_mountinfo(text)
    assert table[1].mountpoint == "/srv/my models"
    found = find_mount(table, "/srv/my models/qwen")
    assert found is not None and found.fstype == "lustre"


def test_proc_mounts_fallback(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mounts").write_text("/dev/sda1 / ext4 rw 0 0\ntmpfs /run tmpfs rw 0 0\n")
    table = mount_table(Roots(proc=proc))
    assert [(m.mountpoint, m.device_key) for m in table] == [
        ("/", "src:/dev/sda1"),
        ("/run", "mnt:/run"),
    ]


def _file(path: Path, size: int = 16) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"w" * size)


def test_weights_rules(real_tmp: Path) -> None:
    models = real_tmp / "models"
    _file(models / "qwen2.5-7b" / "model-00001.safetensors")
    _file(models / "nested" / "snapshots" / "abc" / "config.json")
    (models / "empty").mkdir(parents=True)
    _file(models / "zero-bytes" / "model.safetensors", size=0)
    _file(models / "partial" / "model-00001.safetensors")
    _file(models / "partial" / "model-00002.safetensors.part")
    _file(models / "aria" / "m.gguf")
    _file(models / "aria" / "m.gguf.aria2")
    _file(models / "marked" / "config.json")
    _file(models / "marked" / ".downloading", size=0)
    _file(models / "hf-incomplete" / "config.json")
    _file(models / "hf-incomplete" / ".cache" / "huggingface" / "download" / "x.incomplete")
    _file(models / ".locks" / "lock")
    _file(models / "llama-3.2-1b-q4_k_m.gguf")
    _file(models / "half.gguf.part")
    _file(models / "README.md")
    weights = collect_weights(Roots(model_dirs=(str(models),)))["weights"]
    assert weights["probed"] is True
    assert [m["name"] for m in weights["models"]] == ["llama-3.2-1b-q4_k_m", "nested", "qwen2.5-7b"]
    assert all(m["shared"] is False for m in weights["models"])


def test_weights_not_probed_without_model_dirs() -> None:
    assert collect_weights(Roots(model_dirs=())) == {"weights": {"probed": False, "models": []}}


def test_weights_probed_but_none_when_dirs_missing(real_tmp: Path) -> None:
    roots = Roots(model_dirs=(str(real_tmp / "gone"),))
    assert collect_weights(roots) == {"weights": {"probed": True, "models": []}}
