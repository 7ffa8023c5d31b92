"""XID and SXid lines from the kernel log.

The source is /dev/kmsg, read non-blocking: the agent keeps the descriptor open, so each
read returns only records it has not seen; the first open returns the ring buffer since
boot, so an XID printed before the agent started is still counted. journalctl was the
alternative, but it needs journald, a process per minute and a `--since` cursor that
either repeats or drops a line printed in the same second; /dev/kmsg has neither
problem (EPIPE tells of records overwritten before they were read). Reading it needs
root or CAP_SYSLOG when kernel.dmesg_restrict is 1: without, kernel XIDs are unknown
and NVML's XID events are the only source.

Lines are matched anywhere in the text, so dmesg's "[  18.6]" and "[Sun Feb 23 ...]",
`dmesg --time-format=iso`, journalctl and kmsg's "6,1234,5678,-;" prefixes all parse.
Trap seen in a real capture: the driver rate-limits its GSP error prints ("Rate limiting
GSP RPC error prints ... (printing 1 of every 30)"), so a log count is a lower bound.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .gpu_nvml import call, pci_key, text
from .registry import Roots

log = logging.getLogger("llmgw_agent.gpu")

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (\d+)")
_SXID = re.compile(
    r"(nvidia-nvswitch\d*): SXid \(PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
    r"(?:\.[0-7])?)\): (\d+)"
)
_KMSG_PREFIX = re.compile(r"^\d+,\d+,\d+,[^;]*;")


@dataclass(frozen=True)
class XidLine:
    kind: str  # "xid" (a GPU) or "sxid" (an NVSwitch)
    pci: str  # "0000:9b:00" for a GPU (the kernel omits the function), "0000:85:00.0" for a switch
    code: int
    device: str | None = None  # nvidia-nvswitchN for an SXid


def parse_line(line: str) -> XidLine | None:
    m = _XID.search(line)
    if m:
        domain, bus, dev = m.group(1).lower().split(":")
        return XidLine("xid", f"{domain[-4:]}:{bus}:{dev}", int(m.group(2)))
    m = _SXID.search(line)
    if m:
        domain, rest = m.group(2).lower().split(":", 1)
        return XidLine("sxid", f"{domain[-4:]}:{rest}", int(m.group(3)), m.group(1))
    return None


def count(
    lines: Iterable[str], into: dict[str, dict[str, dict[int, int]]] | None = None
) -> dict[str, dict[str, dict[int, int]]]:
    """Add each line's XID to cumulative counters {"xid"|"sxid": {pci: {code: n}}}.

    Every line counts, so an XID repeated is never lost.
    """
    out = into if into is not None else {"xid": {}, "sxid": {}}
    for line in lines:
        hit = parse_line(line)
        if hit is None:
            continue
        codes = out.setdefault(hit.kind, {}).setdefault(hit.pci, {})
        codes[hit.code] = codes.get(hit.code, 0) + 1
    return out


class KmsgReader:
    """New kernel log lines on each call, never blocking. Raises OSError if the file
    cannot be opened (no permission): the caller then knows kernel XIDs are unknown."""

    def __init__(self, path: Path = Path("/dev/kmsg")) -> None:
        self.path = path
        self._fd: int | None = None
        self._partial = b""

    def __call__(self) -> list[str]:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(self._fd, 8192)  # one record per read from /dev/kmsg
            except BlockingIOError:
                break  # nothing new
            except BrokenPipeError:
                continue  # records overwritten before we read them; the next read resumes
            if not chunk:
                break  # a regular file at its end
            chunks.append(chunk)
        data = self._partial + b"".join(chunks)
        body, _, self._partial = data.rpartition(b"\n")
        out: list[str] = []
        for raw in body.split(b"\n") if body else []:
            line = raw.decode("utf-8", "replace")
            if line.startswith(" "):
                continue  # a kmsg continuation line (" SUBSYSTEM=pci")
            out.append(_KMSG_PREFIX.sub("", line))
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# --- what the gpus collector sends, once a minute ---------------------------------------


def _kernel_lines(roots: Roots) -> list[str] | None:
    """New kernel log lines, or None when the kernel log cannot be read."""
    source = roots.memo.get("gpu.kernel_log")
    if source is None and "gpu.kernel_log" not in roots.memo:
        # Only the live host's log; a fixture root must not read the test machine's.
        source = KmsgReader(Path("/dev/kmsg")) if roots.proc == Path("/proc") else None
        roots.memo["gpu.kernel_log"] = source
    if source is None:
        return None
    try:
        return list(source())
    except OSError as exc:
        log.warning("cannot read the kernel log (%s): kernel XIDs are unknown", exc)
        roots.memo["gpu.kernel_log"] = None
        return None


def _nvml_xids(roots: Roots, nvml: Any, handles: list[Any]) -> dict[str, dict[int, int]]:
    """Drain NVML's XID events (wait 0 ms) into cumulative counts by PCI address (the
    kernel log's key; a UUID may be unreadable on a failing card)."""
    counts: dict[str, dict[int, int]] = roots.memo.setdefault("gpu.xid_nvml", {})
    xid_type = getattr(nvml, "nvmlEventTypeXidCriticalError", 8)
    event_set = roots.memo.get("gpu.event_set")
    if event_set is None:
        event_set = call(nvml, "nvmlEventSetCreate")
        if event_set is None:
            return counts
        for h in handles:
            call(nvml, "nvmlDeviceRegisterEvents", h, xid_type, event_set)
        roots.memo["gpu.event_set"] = event_set
    for _ in range(10_000):  # bounded: a storm must not hold the heartbeat
        data = call(nvml, "nvmlEventSetWait", event_set, 0)  # NVMLError_Timeout: none left
        if data is None:
            break
        if int(getattr(data, "eventType", 0)) & xid_type:
            pci = call(nvml, "nvmlDeviceGetPciInfo", data.device)
            bus = text(getattr(pci, "busId", None)) if pci is not None else None
            if bus:
                codes = counts.setdefault(pci_key(bus, with_function=False), {})
                code = int(data.eventData)
                codes[code] = codes.get(code, 0) + 1
    return counts


def gpu_xids(
    roots: Roots, nvml: Any, devices: list[tuple[int, Any, str | None, str | None]]
) -> tuple[dict[str, dict[int, int]] | None, dict[str, Any]]:
    """Cumulative XID counts per GPU PCI address ("0000:9b:00"), and the node-level
    extras (sxids, xids_unattributed).

    The kernel log and NVML events see the same XIDs; each code's count is the larger of
    the two, so one XID is never counted twice and one source missing it loses nothing.
    """
    kernel: dict[str, dict[str, dict[int, int]]] = roots.memo.setdefault(
        "gpu.xid_kernel", {"xid": {}, "sxid": {}}
    )
    lines = _kernel_lines(roots)
    if lines is not None:
        count(lines, kernel)
    events = _nvml_xids(roots, nvml, [h for _, h, _, _ in devices if h is not None])
    if lines is None and roots.memo.get("gpu.event_set") is None:
        return None, {}
    known = {pci_key(b, with_function=False) for _, _, _, b in devices if b}
    merged: dict[str, dict[int, int]] = {p: dict(c) for p, c in events.items()}
    for pci, codes in kernel["xid"].items():
        target = merged.setdefault(pci, {})
        for code, n in codes.items():
            target[code] = max(target.get(code, 0), n)
    # e.g. a GPU fallen off the bus, which NVML no longer lists
    unattributed = {
        pci: {str(c): n for c, n in sorted(codes.items())}
        for pci, codes in merged.items()
        if pci not in known
    }
    extra: dict[str, Any] = {}
    if unattributed:
        extra["xids_unattributed"] = unattributed
    if lines is not None:
        extra["sxids"] = {
            pci: {str(c): n for c, n in sorted(codes.items())}
            for pci, codes in kernel["sxid"].items()
        }
    return merged, extra
