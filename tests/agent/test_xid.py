"""XID and SXid kernel lines from real captures; counting with NVML events."""

from __future__ import annotations

from pathlib import Path

from llmgw_agent.collectors import Roots
from llmgw_agent.collectors.gpu import collect_gpus
from llmgw_agent.collectors.xid_log import KmsgReader, count, parse_line
from llmgw_agent.protocol.xids import HARDWARE_XIDS, is_hardware_xid

from .fake_nvml import REALDATA, fake, load_smi_q


def lines(name: str) -> list[str]:
    return (REALDATA / name).read_text().splitlines()[1:]  # the first line is the source


def test_gpud_iso_dmesg_counts_every_repeat() -> None:
    got = count(lines("xid-dmesg-gpud-iso.txt"))
    assert got["xid"] == {"0000:38:00": {13: 16, 43: 1}}
    assert got["sxid"] == {}


def test_gpud_xid119_with_its_rpc_history_noise() -> None:
    got = count(lines("xid-dmesg-gpud-xid119.txt"))
    # Five printed; the driver says it rate-limits the rest ("1 of every 30").
    assert got["xid"] == {"0000:9b:00": {119: 5}}


def test_imbue_xid_and_nvswitch_sxid() -> None:
    got = count(lines("xid-sxid-dmesg-imbue.txt"))
    assert got["xid"] == {"0000:0f:00": {94: 1, 64: 1}}
    assert got["sxid"] == {"0000:85:00.0": {12028: 1}}
    sxid = parse_line(lines("xid-sxid-dmesg-imbue.txt")[3])
    assert sxid is not None and sxid.device == "nvidia-nvswitch2"


def test_azure_nhc_line_with_pci_domain() -> None:
    hit = parse_line(lines("xid-azure-nhc-readme.txt")[0])
    assert hit is not None and (hit.pci, hit.code) == ("0002:00:00", 119)


def test_hardware_list() -> None:
    for code in (48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140):
        assert is_hardware_xid(code), code
    for code in (13, 31, 43, 45, 154):
        assert not is_hardware_xid(code), code
    assert all(mnemonic and meaning for mnemonic, meaning in HARDWARE_XIDS.values())


def test_kmsg_reader_returns_only_new_records(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    iso = lines("xid-dmesg-gpud-iso.txt")
    # /dev/kmsg's own record format: "prio,seq,usec,flags;message", continuations indented.
    log.write_text(f"4,1,100,-;{iso[0].split('+00:00 ', 1)[1]}\n SUBSYSTEM=pci\n")
    reader = KmsgReader(log)
    first = reader()
    assert len(first) == 1 and first[0].startswith("NVRM: Xid (PCI:0000:38:00): 13")
    assert reader() == []
    with log.open("a") as f:
        f.write(f"4,2,200,-;{iso[16].split('+00:00 ', 1)[1]}\n")
    assert [parse_line(x).code for x in reader() if parse_line(x)] == [43]  # type: ignore[union-attr]
    reader.close()


def test_collector_merges_kernel_and_nvml_without_double_counting() -> None:
    capture = "nvidia-smi-q-remapped-rows-A100-stas00.txt"
    nvml = fake(*load_smi_q(capture))
    # The same capture's kernel line, as the kernel log would give it.
    kernel = [x for x in (REALDATA / capture).read_text().splitlines() if "NVRM: Xid" in x]
    roots = Roots(
        proc=Path("/nonexistent"),
        nvml=lambda: nvml,
        memo={"gpu.kernel_log": lambda: list(kernel), "clock": lambda: 0.0},
    )
    data = collect_gpus(roots)
    assert data["gpus"][0]["xids"] == {"63": 1}  # one XID, seen by NVML and the kernel
    assert data["sxids"] == {}
    assert "xids_unattributed" not in data


def test_xid_of_a_gpu_nvml_no_longer_lists_is_kept() -> None:
    nvml = fake(*load_smi_q("nvidia-smi-q-H200-thamada.txt"))
    kernel = lines("xid-dmesg-gpud-xid119.txt")
    roots = Roots(
        proc=Path("/nonexistent"),
        nvml=lambda: nvml,
        memo={"gpu.kernel_log": lambda: kernel, "clock": lambda: 0.0},
    )
    data = collect_gpus(roots)
    assert data["gpus"][0]["xids"] == {}
    assert data["xids_unattributed"] == {"0000:9b:00": {"119": 5}}
