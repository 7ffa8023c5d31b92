"""What makes a GPU not free, in one place.

An ECC fault, an XID of the hardware kind (the list is the agent's,
llmgw_agent.protocol.xids, so both sides read the same one), a pending or failed row
remap, another process on the card, or a card the driver no longer lists.
Each is named in the refusal, because "GPU unhealthy" tells an operator
nothing about what to do.

And what a card says of its multi-node NVLink domain (GB200 NVL72, NVLink
Switch systems): the domain its GPU fabric names, and why it is not joined.

All of it is worked out when a card's report is stored (card_state) and
kept on its row, so no reader works it out again; llmgw.inventory.cards is
the one view every reader takes of it.
"""

from __future__ import annotations

from typing import Any

from llmgw_agent.protocol.xids import HARDWARE_XIDS, is_hardware_xid

__all__ = [
    "HARDWARE_XIDS",
    "card_problem",
    "card_state",
    "degraded",
    "domain_of",
    "hardware_xids",
    "unhealthy_reason",
    "wear",
]

ZERO_UUIDS = {"", "00000000-0000-0000-0000-000000000000"}


def hardware_xids(xids: dict[str, int] | None) -> dict[int, int]:
    out: dict[int, int] = {}
    for code, count in (xids or {}).items():
        try:
            number = int(code)
        except ValueError:
            continue
        if count and is_hardware_xid(number):
            out[number] = count
    return out


def unhealthy_reason(gpu: Any) -> str:
    if gpu.missing:
        return "no longer seen by the driver (fallen off the bus?)"
    if gpu.ecc_uncorrected:
        return f"{gpu.ecc_uncorrected} uncorrected ECC errors"
    # A remap before the XIDs: XID 63/64 only announce one, and what to do
    # (reset, or replace) is the remap's state.
    rows = gpu.remapped_rows or {}
    if rows.get("failed"):
        return "a row remap failed: the card needs replacing"
    if rows.get("pending"):
        return "a row remap is pending: reset the GPU to apply it"
    hardware = hardware_xids(gpu.xids)
    if hardware:
        listed = ", ".join(f"XID {code} x{count}" for code, count in sorted(hardware.items()))
        return f"hardware XIDs: {listed}"
    if gpu.foreign_processes:
        return f"{gpu.foreign_processes} other process(es) on the card"
    return ""


def domain_of(fabric: dict[str, Any] | None) -> str | None:
    """The domain (ClusterUUID/CliqueId) a card's fabric names, joined or
    not; None for none. A single machine's NVSwitch reports a cluster of
    zeros: no domain."""
    if not fabric:
        return None
    cluster = (fabric.get("cluster_uuid") or "").strip().lower()
    if cluster in ZERO_UUIDS or fabric.get("multi_node") is False or set(cluster) <= {"0", "-"}:
        return None
    return f"{cluster}/{fabric.get('clique_id', 0)}"


def card_problem(fabric: dict[str, Any] | None) -> str:
    """Why a card of a domain is not joined, or degraded; '' when it is well."""
    if not fabric:
        return "fabric state not reported"
    state, status = fabric.get("state"), fabric.get("status")
    if state != "completed":
        return f"fabric registration {state or 'unknown'}" + (f" ({status})" if status else "")
    if status and status != "success":
        return f"fabric registration completed with status {status}"
    if fabric.get("health") in ("unhealthy",):
        return "fabric health unhealthy"
    return ""


def degraded(fabric: dict[str, Any] | None) -> bool:
    if not fabric:
        return False
    return fabric.get("bandwidth") == "degraded" or fabric.get("health") == "limited_capacity"


# The columns of a Gpu row that card_state fills.
CARD_STATE = ("unhealthy_reason", "nvlink_domain", "nvlink_problem", "nvlink_degraded")


def card_state(gpu: Any) -> dict[str, Any]:
    """A card's state from what it reported, by CARD_STATE column. Takes
    anything with a Gpu row's attributes, so the migration that filled the
    columns ran this same function."""
    domain = domain_of(gpu.fabric)
    return {
        "unhealthy_reason": unhealthy_reason(gpu),
        "nvlink_domain": domain,
        "nvlink_problem": card_problem(gpu.fabric) if domain else "",
        "nvlink_degraded": degraded(gpu.fabric),
    }


# PCIe replays past which a card shows wear. A replay is the link resending a
# packet it got wrong: a few over a card's life are the link doing its job,
# and the simulated fleet reports up to 40; hundreds point at a riser, slot or
# cable going bad. Every surface asks wear() below, so none shows "2 PCIe
# replays" as wear while another counts the same card as well.
PCIE_REPLAYS_WORN = 100


def _nvlink_errors(links: Any) -> int:
    return sum(
        int(v)
        for link in links or []
        if isinstance(link, dict)
        for k, v in link.items()
        if k != "link" and isinstance(v, int | float)
    )


def wear(gpu: Any) -> dict[str, Any]:
    """How worn a card looks, and why in words: level 0 none, 1 some, 2 worn.
    For the console's node page and GPU map alike, from the row as stored."""
    why: list[str] = []
    level = 0
    xids = sorted((gpu.xids or {}).keys(), key=lambda code: (len(str(code)), str(code)))
    if xids:
        why.append(f"XID {', '.join(str(x) for x in xids)}")
        level = 2
    rows = gpu.remapped_rows or {}
    if rows.get("uncorrectable") or rows.get("pending") or rows.get("failed"):
        flags = (", pending" if rows.get("pending") else "") + (
            ", failed" if rows.get("failed") else ""
        )
        why.append(f"remapped rows: {rows.get('uncorrectable') or 0} uncorrectable{flags}")
        level = 2
    if rows.get("correctable"):
        why.append(f"{rows['correctable']} corrected rows")
        level = max(level, 1)
    if (gpu.pcie_replays or 0) > PCIE_REPLAYS_WORN:
        why.append(f"{gpu.pcie_replays} PCIe replays")
        level = max(level, 1)
    nvlink = _nvlink_errors(gpu.nvlink_errors)
    if nvlink:
        why.append(f"{nvlink} NVLink errors")
        level = max(level, 1)
    if gpu.ecc_uncorrected:
        why.append(f"{gpu.ecc_uncorrected} uncorrected ECC")
        level = 2
    return {"level": level, "why": why}
