"""What makes a GPU not free, in one place.

An ECC fault, an XID of the hardware kind (the list is the agent's,
llmgw_agent.protocol.xids, so both sides read the same one), a pending or failed row
remap, another process on the card, or a card the driver no longer lists.
Each is named in the refusal, because "GPU unhealthy" tells an operator
nothing about what to do.
"""

from __future__ import annotations

from typing import Any

from llmgw_agent.protocol.xids import HARDWARE_XIDS, is_hardware_xid

__all__ = ["HARDWARE_XIDS", "hardware_xids", "unhealthy_reason"]


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
