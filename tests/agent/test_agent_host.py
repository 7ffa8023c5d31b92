"""system, cpu and memory collectors over a /proc recorded from a real machine."""

from __future__ import annotations

import shutil
from pathlib import Path

from llmgw_agent.collectors import Roots, run_collectors
from llmgw_agent.collectors.cpu import collect_cpu
from llmgw_agent.collectors.memory import collect_memory
from llmgw_agent.collectors.system import collect_system, vector_flags

from tests.agent.helpers import HOST, host_roots


def test_system_from_recorded_host() -> None:
    system = collect_system(host_roots())["system"]
    assert system["os"] == "Debian GNU/Linux 12 (bookworm)"
    assert system["kernel"] == "6.18.44-fc-v857"
    assert system["arch"] == "x86_64"
    assert system["cpu_model"] == "AMD EPYC"
    assert system["cpus"] == 2
    assert system["memory_total_bytes"] == 24683652 * 1024
    assert system["nvidia_driver"] == "550.54.15"
    assert {"avx", "avx2", "avx512f", "avx512_bf16", "fma"} <= set(system["cpu_flags"])
    # Only vector extensions: not every flag the CPU has.
    assert "sse2" not in system["cpu_flags"] and "aes" not in system["cpu_flags"]


def test_system_unknown_is_null_not_zero(tmp_path: Path) -> None:
    # An empty tree must not borrow the test machine's answers.
    (tmp_path / "proc").mkdir()
    system = collect_system(Roots(proc=tmp_path / "proc", rootfs=tmp_path))["system"]
    assert system == {
        "os": None,
        "kernel": None,
        "arch": None,
        "cpu_model": None,
        "cpu_flags": [],
        "cpus": None,
        "memory_total_bytes": None,
        "nvidia_driver": None,
    }


def test_vector_flags_arm_and_x86() -> None:
    arm = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve sve2 i8mm bf16"
    assert vector_flags(arm.split()) == ["asimd", "asimddp", "bf16", "i8mm", "sve", "sve2"]
    assert vector_flags(["sse4_2", "avx", "amx_tile", "avx512_fp16"]) == [
        "amx_tile",
        "avx",
        "avx512_fp16",
    ]


def test_memory_from_meminfo() -> None:
    memory = collect_memory(host_roots())["memory"]
    assert memory == {
        "used_bytes": (24683652 - 24086972) * 1024,
        "available_bytes": 24086972 * 1024,
    }


def _proc_copy(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    shutil.copytree(HOST / "proc", proc)
    return proc


def test_cpu_utilisation_between_calls(tmp_path: Path) -> None:
    proc = _proc_copy(tmp_path)
    roots = Roots(proc=proc, cpu_first_sample_s=0)
    first = collect_cpu(roots)["cpu"]
    # Nothing to subtract from yet: unknown, never 0.
    assert first["utilization_percent"] is None
    assert first["load"] == [0.23, 0.33, 0.18]
    # 300 ticks later: 75 user + 15 system + 10 steal busy, 180 idle + 20 iowait idle.
    stat = (proc / "stat").read_text().splitlines()
    values = [int(v) for v in stat[0].split()[1:]]
    for i, add in {0: 75, 2: 15, 3: 180, 4: 20, 7: 10}.items():
        values[i] += add
    stat[0] = "cpu  " + " ".join(map(str, values))
    (proc / "stat").write_text("\n".join(stat) + "\n")
    assert collect_cpu(roots)["cpu"]["utilization_percent"] == 33.33
    # No ticks at all between two reads: still unknown.
    assert collect_cpu(roots)["cpu"]["utilization_percent"] is None


def test_cpu_first_call_waits_for_a_second_sample(tmp_path: Path) -> None:
    roots = Roots(proc=_proc_copy(tmp_path), cpu_first_sample_s=0.01)
    # The recorded file does not move, so the answer is unknown, but a sample was taken.
    assert collect_cpu(roots)["cpu"]["utilization_percent"] is None
    assert "cpu.counters" in roots.memo


def test_heartbeat_part_runs_on_the_recorded_host() -> None:
    data, results = run_collectors(host_roots(), part="heartbeat")
    # Other heartbeat collectors (GPUs, sensors, ports) find nothing in this tree.
    assert {"cpu", "memory", "filesystems", "weights"} <= {r["name"] for r in results}
    assert all(r["ok"] for r in results), results
    assert "filesystems" not in data  # no model dirs: unknown
    assert data["weights"] == {"probed": False, "models": []}
