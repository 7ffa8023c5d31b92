"""NVLink fabric, IMEX, engines, room for weights, clock skew and the credential."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .nvlink import fabric_problems, imex_problems
from .result import FAIL, OK, UNKNOWN, WARN, Check, worst

GIB = 2**30
SKEW_WARN_S, SKEW_FAIL_S = 2.0, 30.0


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def nvlink_fabric(
    gpus: Sequence[Mapping[str, Any]] | None,
    why: str = "",
    pending_s: Mapping[int, float] | None = None,
) -> Check:
    name = "nvlink fabric"
    if gpus is None:
        return Check(
            name, UNKNOWN, f"NVML unavailable: {why}", "check the NVIDIA driver: nvidia-smi"
        )
    if not gpus:
        return Check(name, UNKNOWN, "not present: no NVIDIA GPU visible through NVML")
    fabric = [
        g for g in gpus if (g.get("fabric") or {}).get("state") not in (None, "not_supported")
    ]
    if not fabric:
        return Check(name, UNKNOWN, f"not present: the driver reports no GPU fabric on "
                     f"{len(gpus)} GPU(s): not an NVLink-domain node")  # fmt: skip
    found = []
    for g in fabric:
        for p in fabric_problems(g, (pending_s or {}).get(int(g.get("index", -1)))):
            pending = "registration" in p.problem and "completed" not in p.problem
            found.append((WARN if pending else FAIL, p))
    if found:
        return Check(name, worst([r for r, _ in found]),
                     "; ".join(f"{p.subject}: {p.problem}" for _, p in found),
                     "; ".join(dict.fromkeys(p.action for _, p in found)))  # fmt: skip
    cliques = sorted({str((g.get("fabric") or {}).get("cluster_uuid")) for g in fabric})
    return Check(name, OK, f"{len(fabric)}/{len(gpus)} GPUs joined (cluster {', '.join(cliques)})")


def imex(gpus: Sequence[Mapping[str, Any]] | None, status: Mapping[str, Any] | None) -> Check:
    name = "imex"
    if not any((g.get("fabric") or {}).get("multi_node") for g in gpus or []):
        return Check(name, UNKNOWN, "not present: not in a multi-node NVLink domain")
    found = imex_problems(gpus or [], status)
    if found:
        return Check(name, FAIL, "; ".join(p.problem for p in found),
                     "; ".join(dict.fromkeys(p.action for p in found)))  # fmt: skip
    assert status is not None
    nodes = status.get("nodes") or []
    return Check(name, OK, f"domain {status.get('domain_state')}, {len(nodes)} node(s) ready, "
                 f"{status.get('channels')} channel(s)")  # fmt: skip


def engines(
    found: Sequence[Mapping[str, Any]] | None,
    why: str = "",
    reported: Sequence[Mapping[str, Any]] | None = None,
) -> Check:
    """`found`: {name, version, path, ok, message} per installed or configured engine.
    `reported`: the engines as the control plane last heard of them from the agent
    ({name, version, status, message}), None when it was not asked."""
    name = "engines"
    if found is None:
        return Check(name, UNKNOWN, f"could not look: {why}")
    underway = [e for e in reported or [] if e.get("status") == "installing"]
    if not found and underway:
        # The install writes its marker last: until then nothing here is installed,
        # and saying "no engine installed" of a node mid-install sent people to fix it.
        said = "; ".join(
            f"{e.get('name')} {e.get('version') or '?'} installing: {e.get('message') or '-'}"
            for e in underway
        )
        return Check(name, WARN, f"none installed yet; the agent last reported {said}",
                     "wait for it: the agent's log shows each step (journalctl -u "
                     "llmgw-agent); doctor says ok once it is installed")  # fmt: skip
    if not found:
        return Check(name, UNKNOWN, "not present: no engine installed or named in agent.yaml",
                     "the agent installs the engines the control plane asks for; "
                     "llmgw-agent must be running")  # fmt: skip
    bad = [e for e in found if not e.get("ok")]
    seen = "; ".join(f"{e['name']} {e.get('version') or '?'}: {e.get('message')}" for e in found)
    if bad:
        return Check(
            name,
            FAIL,
            seen,
            "; ".join(
                f"{e['name']} at {e.get('path')} does not run: reinstall it (remove its folder; "
                "the agent installs it again) or fix the missing libraries ldd names"
                for e in bad
            ),
        )
    return Check(name, OK, seen)


def _room_one(fs: Mapping[str, Any], held: Sequence[Mapping[str, Any]]) -> tuple[str, str, str]:
    free, total = int(fs["free_bytes"]), int(fs["total_bytes"])
    dirs = fs.get("dirs") or []
    here = [
        m for m in held if any(str(m.get("path", "")).startswith(d.rstrip("/") + "/") for d in dirs)
    ]
    sizes = [int(m["size_bytes"]) for m in here if m.get("size_bytes") is not None]
    largest = max(sizes, default=0)
    seen = (f"{fs.get('mount')}: {_gib(free)} free of {_gib(total)}; {len(here)} model(s) "
            f"{_gib(sum(sizes))}, largest {_gib(largest)}")  # fmt: skip
    todo = f"free space on {fs.get('mount')}: remove weights no longer held, or grow it"
    if free < GIB or free < total * 0.01:
        return FAIL, seen, todo
    if free < largest:
        return WARN, seen + ": no room for another copy of the largest", todo
    return OK, seen, ""


def room(
    filesystems: Sequence[Mapping[str, Any]] | None,
    held: Sequence[Mapping[str, Any]],
    missing: Sequence[str] = (),
) -> Check:
    """`held`: models on disk {name, path, size_bytes}; `missing`: models this node must run
    whose weights it does not hold yet (the control plane's record)."""
    name = "model filesystems"
    if filesystems is None:
        return Check(name, UNKNOWN, "not present: no model_dirs in agent.yaml, or none exist",
                     "list where weights live under model_dirs in agent.yaml")  # fmt: skip
    rows = [_room_one(fs, held) for fs in filesystems]
    results = [r for r, _, _ in rows]
    parts = [s for _, s, _ in rows]
    actions = [a for _, _, a in rows if a]
    if missing:
        results.append(WARN)
        parts.append(f"assigned but not on disk: {', '.join(missing)}")
        actions.append("the weights must be fetched to a model_dir before these shards start")
    return Check(name, worst(results), "; ".join(parts), "; ".join(actions))


def clock_skew(offset_s: float | None, why: str = "", rtt_s: float = 0.0) -> Check:
    """`offset_s`: the control plane's clock minus this node's, measured over `rtt_s`."""
    name = "clock skew"
    if offset_s is None:
        return Check(name, UNKNOWN, f"could not ask the control plane: {why}")
    seen = f"{offset_s:+.1f} s against the control plane (±{rtt_s / 2:.2f} s)"
    todo = "sync the clock: timedatectl status; chronyc tracking (or systemctl restart chronyd)"
    if abs(offset_s) > SKEW_FAIL_S:
        return Check(name, FAIL, seen, todo)
    if abs(offset_s) > SKEW_WARN_S:
        return Check(name, WARN, seen, todo)
    return Check(name, OK, seen)


def credential(status: int | None, node: str, said: str = "", have: bool = True) -> Check:
    """`status`: the control plane's HTTP answer to an authenticated call; None: no answer.
    `have`: False when there is no credential file: the node never joined."""
    name = "credential"
    if not have:
        return Check(name, FAIL, f"no credential: {said or 'the credential file is missing'}",
                     "give the agent a join token (join_token_file) and start llmgw-agent")  # fmt: skip
    if status is None:
        return Check(name, UNKNOWN, said or "could not reach the control plane",
                     "check server_url in agent.yaml and that the control plane is up")  # fmt: skip
    if status == 200:
        return Check(name, OK, f"accepted as node {node}")
    if status in (401, 403):
        return Check(name, FAIL, f"refused ({status}): revoked, or unknown to the control plane: {said}",
                     f"issue a new join token (llmgw node add {node}), put it in join_token_file, "
                     "remove the credential file and restart llmgw-agent")  # fmt: skip
    return Check(name, UNKNOWN, f"control plane answered {status}: {said}")
