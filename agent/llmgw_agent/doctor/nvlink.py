"""What keeps this node's GPUs out of a multi-node NVLink domain, and what to do.

`problems()` is pure: it reads the registration's `gpus` (with `fabric`) and `imex`, so
the control plane can run it on what a node reported (`from llmgw_agent.doctor import
problems`), and doctor on what this node reads now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..collectors import Roots
from ..collectors.gpu import collect_inventory
from ..collectors.gpu_nvml import now

_FM = "check nvidia-fabricmanager on this tray: systemctl status nvidia-fabricmanager"


@dataclass(frozen=True)
class Problem:
    subject: str  # "GPU 3", "IMEX"
    problem: str
    action: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.problem} — {self.action}"


def _minutes(seconds: float | None) -> str:
    if seconds is None or seconds < 60:
        return ""
    return f" for {round(seconds / 60)} min"


def fabric_problems(gpu: Mapping[str, Any], pending_s: float | None = None) -> list[Problem]:
    """A GPU's fabric: registered (state completed), status success, healthy, full bandwidth.

    A GPU whose driver has no fabric to report (no `fabric`, or state not_supported) has
    nothing to join and no problem here.
    """
    fab = gpu.get("fabric")
    subject = f"GPU {gpu.get('index', '?')}"
    if not fab or fab.get("state") in (None, "not_supported"):
        return []
    out: list[Problem] = []
    state, status = fab.get("state"), fab.get("status")
    if state in ("not_started", "in_progress"):
        words = "not started" if state == "not_started" else "in progress"
        out.append(Problem(subject, f"fabric registration {words}{_minutes(pending_s)}", _FM))
    elif state == "completed" and status not in (None, "success"):
        reason = str(status).replace("_", " ")
        out.append(
            Problem(
                subject,
                f"fabric registration completed with status {reason!r}",
                "the NVLink domain could not give this GPU its place (e.g. its partition or "
                "NVLinks are missing); check the fabric manager logs (NMX-C / "
                "nvidia-fabricmanager) and `nvidia-smi -q | grep -A8 Fabric`",
            )
        )
    if fab.get("health") in ("unhealthy", "limited_capacity"):
        out.append(
            Problem(
                subject,
                f"fabric health {fab['health'].replace('_', ' ')}",
                "run `nvidia-smi -q | grep -A12 Fabric` for the failing health bits; "
                "check the NVLink cables/trays and the fabric manager logs, then reset the GPU",
            )
        )
    if fab.get("bandwidth") == "degraded":
        out.append(
            Problem(
                subject,
                "NVLink fabric bandwidth degraded",
                "some of its NVLinks are down: `nvidia-smi nvlink -s`; reseat or replace the "
                "link, then restart nvidia-fabricmanager",
            )
        )
    return out


def imex_problems(
    gpus: Sequence[Mapping[str, Any]], imex: Mapping[str, Any] | None
) -> list[Problem]:
    """IMEX matters only on a node in a multi-node domain (a non-zero ClusterUUID)."""
    in_domain = any((g.get("fabric") or {}).get("multi_node") for g in gpus)
    if not in_domain:
        return []
    if imex is None:
        return [
            Problem(
                "IMEX",
                "this node is in a multi-node NVLink domain but nvidia-imex is not installed",
                "install the nvidia-imex package matching the driver, list the domain's "
                "nodes in /etc/nvidia-imex/nodes_config.cfg, systemctl enable --now nvidia-imex",
            )
        ]
    out: list[Problem] = []
    if not imex.get("up"):
        out.append(
            Problem(
                "IMEX",
                f"domain state {imex.get('domain_state') or 'unknown'}",
                "systemctl status nvidia-imex; journalctl -u nvidia-imex; every node in "
                "nodes_config.cfg must run the same IMEX version",
            )
        )
    for node in imex.get("nodes") or []:
        if node.get("status") != "ready":
            out.append(
                Problem(
                    "IMEX",
                    f"node #{node.get('index')} {node.get('address')} is {node.get('status')}",
                    "check nvidia-imex on that node and that this one can reach it on TCP 50000",
                )
            )
    if not imex.get("channels"):
        out.append(
            Problem(
                "IMEX",
                "no IMEX channel in /dev/nvidia-caps-imex-channels",
                "load nvidia with NVreg_CreateImexChannel0=1 (or create channel0 with the "
                "nvidia-caps-imex-channels major number); a CUDA process needs one",
            )
        )
    return out


def problems(
    gpus: Sequence[Mapping[str, Any]],
    imex: Mapping[str, Any] | None,
    pending_s: Mapping[int, float] | None = None,
) -> list[Problem]:
    """Every fabric and IMEX problem; `pending_s[index]` says how long a GPU has waited."""
    out: list[Problem] = []
    for gpu in gpus:
        out.extend(fabric_problems(gpu, (pending_s or {}).get(int(gpu.get("index", -1)))))
    out.extend(imex_problems(gpus, imex))
    return out


def check_node(roots: Roots) -> tuple[list[Problem], list[str]]:
    """Problems of this node, and notes (what could not be checked).

    Registration in progress is timed from the first time this process saw it, in
    roots.memo, so an agent calling this repeatedly reports how long it has waited.
    """
    data = collect_inventory(roots)
    gpus: list[dict[str, Any]] = data.get("gpus") or []
    if not gpus:
        return [], ["no NVIDIA GPU visible through NVML: GPU fabric checks skipped"]
    since: dict[int, float] = roots.memo.setdefault("doctor.pending_since", {})
    t = now(roots)
    pending: dict[int, float] = {}
    for g in gpus:
        idx = int(g["index"])
        if (g.get("fabric") or {}).get("state") in ("not_started", "in_progress"):
            pending[idx] = t - since.setdefault(idx, t)
        else:
            since.pop(idx, None)
    notes = []
    if not any(g.get("fabric") for g in gpus):
        notes.append("the driver reports no GPU fabric: not an NVLink-domain node")
    return problems(gpus, data.get("imex"), pending or None), notes
