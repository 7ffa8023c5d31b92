"""perftest's `ib_write_bw` for the fabric test: B's agent serves, A's runs the client.

The control plane pairs the two nodes' adapters rail by rail and asks for
one rail at a time (llmgw.fabrics.fabric_test); this module builds the
command lines, runs them through the agent's runner (so agent.yaml's
command_wrapper applies), and reads perftest's result table.

The table is read by its heading, never by column number: perftest prints
warnings between the heading and the row ("Conflicting CPU frequency values
detected"), and the unit follows --report_gbits (Gb/sec) or not (MB/sec).
perftest is installed on first use, as the sm collector installs
infiniband-diags: at most once an hour, with the node's package manager.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .collectors.registry import CommandResult, Roots
from .protocol import perftest as wire

log = logging.getLogger("llmgw_agent.perftest")

TOOL = "ib_write_bw"
INSTALL_EVERY_S = 3600.0
MEMO_INSTALL_AT = "perftest.install_at"
MEMO_SERVERS = "perftest.servers"
# A server that has not failed this soon is listening; the client retries a refused connect.
START_GRACE_S = 0.5
CONNECT_TRIES = 3
# perftest's "MB/sec" is 2**20 bytes a second (its format factor), not 10**6.
MB_PER_SEC_IN_GBPS = 1048576 * 8 / 1e9
_UNITS = {"Gb/sec": 1.0, "MB/sec": MB_PER_SEC_IN_GBPS}
_HEADING = re.compile(r"^\s*#bytes\s")
_CELL_SPLIT = re.compile(r"\s{2,}|\t+")
_UNIT = re.compile(r"\[([^\]]+)\]")
_lock = threading.Lock()


class ParseError(ValueError):
    pass


def _columns(heading: str) -> list[str]:
    return [c.strip() for c in _CELL_SPLIT.split(heading.strip()) if c.strip()]


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def parse(text: str) -> wire.Reading:
    """The result row of the largest message size (with -a, the sweep's last),
    converted to Gb/s. Raises ParseError when no table with a BW average is found."""
    rows: list[dict[str, float]] = []
    names: list[str] | None = None
    for line in text.splitlines():
        if _HEADING.match(line):
            names = _columns(line)
            continue
        if names is None:
            continue
        cells = line.split()
        values = [_number(c) for c in cells]
        # Anything else between heading and rule (a warning) is not a row.
        if len(cells) == len(names) and all(v is not None for v in values):
            rows.append({n: v for n, v in zip(names, values, strict=True) if v is not None})
    if names is None:
        raise ParseError(f"no result table (no line starting '#bytes') in {TOOL}'s output")
    average = next((n for n in names if n.startswith("BW average")), None)
    if average is None:
        raise ParseError(f"the result table has no 'BW average' column: {names}")
    unit_match = _UNIT.search(average)
    unit = unit_match.group(1) if unit_match else ""
    if unit not in _UNITS:
        raise ParseError(f"unknown bandwidth unit {unit!r} in {average!r}")
    if not rows:
        raise ParseError("the result table has a heading but no row")
    row = max(rows, key=lambda r: r.get("#bytes", 0.0))
    factor = _UNITS[unit]
    peak = next((n for n in names if n.startswith("BW peak")), None)
    rate = next((n for n in names if n.startswith("MsgRate")), None)
    payload: dict[str, Any] = {
        "bytes": int(row.get("#bytes", 0)),
        "iterations": int(row["#iterations"]) if "#iterations" in row else None,
        "bw_peak_gbps": round(row[peak] * factor, 3) if peak in row else None,
        "bw_average_gbps": round(row[average] * factor, 3),
        "msg_rate_mpps": row.get(rate) if rate else None,
        "unit": unit,
    }
    try:
        return msgspec.convert(payload, wire.Reading)
    except msgspec.ValidationError as exc:
        raise ParseError(f"result row out of bounds: {exc}") from None


def gid_index(roots: Roots, device: str, port: int) -> int | None:
    """The RoCE v2 GID index of an Ethernet port, None on an InfiniBand one.

    An IPv4-mapped RoCE v2 GID is preferred (the one NCCL picks by default);
    a zero GID is an unused slot. Raises when an Ethernet port has none."""
    base = roots.sys / "class" / "infiniband" / device / "ports" / str(port)
    try:
        link_layer = (base / "link_layer").read_text().strip()
    except OSError:
        raise RuntimeError(f"{device} port {port}: no such RDMA port under {base}") from None
    if link_layer != "Ethernet":
        return None
    found: list[tuple[bool, int]] = []
    types = base / "gid_attrs" / "types"
    for entry in sorted(types.iterdir(), key=lambda p: int(p.name)) if types.is_dir() else []:
        try:
            kind = entry.read_text().strip()
            gid = (base / "gids" / entry.name).read_text().strip()
        except OSError:  # an unused slot reads EINVAL
            continue
        if kind.lower() != "roce v2" or set(gid.replace(":", "")) <= {"0"}:
            continue
        found.append((not gid.startswith("0000:0000:0000:0000:0000:ffff:"), int(entry.name)))
    if not found:
        raise RuntimeError(f"{device} port {port}: Ethernet, but no RoCE v2 GID is configured")
    return min(found)[1]


def argv(args: wire.ServerArgs, gid: int | None, server: str | None = None) -> list[str]:
    line = [TOOL, "-d", args.device, "-i", str(args.port), "-p", str(args.tcp_port),
            "-D", str(args.duration_s), "-s", str(args.size), "-F", "--report_gbits"]  # fmt: skip
    if gid is not None:
        line += ["-x", str(gid)]
    if server is not None:
        line.append(server)
    return line


def _is_missing(result: CommandResult) -> bool:
    # Through a wrapper the runner itself succeeds: env says 127, sudo "command not found".
    return result.returncode != 0 and (
        result.returncode == 127 or "command not found" in result.stderr
    )


def _install_command(roots: Roots) -> list[str] | None:
    for d in ("usr/bin", "bin", "usr/sbin"):
        if (roots.rootfs / d / "apt-get").exists():
            return ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "perftest"]
    for d in ("usr/bin", "bin"):
        if (roots.rootfs / d / "dnf").exists():
            return ["dnf", "install", "-y", "perftest"]
    return None


def _install(roots: Roots) -> None:
    """Install perftest, at most once an hour; raises saying why it cannot."""
    now = roots.clock()
    last = roots.memo.get(MEMO_INSTALL_AT)
    if last is not None and now - last < INSTALL_EVERY_S:
        raise RuntimeError(f"{TOOL} is missing and installing perftest failed within the hour")
    roots.memo[MEMO_INSTALL_AT] = now
    command = _install_command(roots)
    if command is None:
        raise RuntimeError(f"cannot install perftest ({TOOL} is missing): no apt-get or dnf")
    log.warning("installing perftest: %s is missing; running %s", TOOL, " ".join(command))
    result = roots.run(command)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip()[-500:]
        raise RuntimeError(f"installing perftest failed: exit {result.returncode}: {tail}")


def run_tool(roots: Roots, line: Sequence[str]) -> CommandResult:
    """Run ib_write_bw, installing perftest first when it is missing."""
    try:
        result = roots.run(line)
    except FileNotFoundError:
        result = CommandResult(127, "", f"{TOOL}: command not found")
    if not _is_missing(result):
        return result
    _install(roots)
    return roots.run(line)


@dataclass
class _Server:
    thread: threading.Thread
    done: threading.Event = field(default_factory=threading.Event)
    result: CommandResult | None = None
    error: str | None = None


def _servers(roots: Roots) -> dict[int, _Server]:
    servers: dict[int, _Server] = roots.memo.setdefault(MEMO_SERVERS, {})
    return servers


def _args(kind: type[Any], given: Mapping[str, Any]) -> Any:
    try:
        return msgspec.convert(dict(given), kind)
    except msgspec.ValidationError as exc:
        raise ValueError(f"bad arguments: {exc}") from None


def _failure(result: CommandResult) -> str:
    tail = (result.stderr.strip() or result.stdout.strip())[-1000:]
    return f"{TOOL} exited {result.returncode}: {tail}"


def server_start(roots: Roots, given: Mapping[str, Any]) -> str:
    """Start an ib_write_bw server in the background; answers once it is up.
    It serves one client and exits (or ends at the runner's timeout)."""
    args: wire.ServerArgs = _args(wire.ServerArgs, given)
    gid = gid_index(roots, args.device, args.port)
    line = argv(args, gid)
    with _lock:
        running = _servers(roots).get(args.tcp_port)
        if running is not None and not running.done.is_set():
            raise RuntimeError(f"a {TOOL} server already listens on TCP port {args.tcp_port}")

        def serve() -> None:
            try:
                server.result = run_tool(roots, line)
            except Exception as exc:  # noqa: BLE001 - reported by the stop request
                server.error = f"{type(exc).__name__}: {exc}"
            finally:
                server.done.set()

        server = _Server(threading.Thread(target=serve, name="perftest-server", daemon=True))
        _servers(roots)[args.tcp_port] = server
    server.thread.start()
    if server.done.wait(START_GRACE_S):
        if server.error is not None:
            raise RuntimeError(server.error)
        if server.result is not None and server.result.returncode != 0:
            raise RuntimeError(_failure(server.result))
    return wire.encode(
        wire.ServerStarted(
            device=args.device, port=args.port, tcp_port=args.tcp_port, gid_index=gid
        )
    )


def server_stop(roots: Roots, given: Mapping[str, Any]) -> str:
    """Wait for the server on the port to finish; its reading when it printed one."""
    args: wire.StopArgs = _args(wire.StopArgs, given)
    with _lock:
        server = _servers(roots).get(args.tcp_port)
    if server is None:
        raise RuntimeError(f"no {TOOL} server was started on TCP port {args.tcp_port}")
    if not server.done.wait(args.wait_s):
        return wire.encode(
            wire.ServerStopped(
                tcp_port=args.tcp_port,
                finished=False,
                error=f"still waiting for its client after {args.wait_s:g} s more; "
                "it ends at the command runner's timeout",
            )
        )
    with _lock:
        _servers(roots).pop(args.tcp_port, None)
    stopped = wire.ServerStopped(tcp_port=args.tcp_port, finished=True, error=server.error)
    if server.result is not None:
        if server.result.returncode != 0:
            stopped.error = _failure(server.result)[:2000]
        else:
            try:
                stopped.reading = parse(server.result.stdout)
            except ParseError as exc:
                stopped.error = str(exc)[:2000]
    return wire.encode(stopped)


def client(roots: Roots, given: Mapping[str, Any]) -> str:
    """Run the client against the server; retries a connection the server refused
    while it was still coming up."""
    args: wire.ClientArgs = _args(wire.ClientArgs, given)
    gid = gid_index(roots, args.device, args.port)
    line = argv(args, gid, args.server)
    for attempt in range(1, CONNECT_TRIES + 1):
        result = run_tool(roots, line)
        if result.returncode == 0:
            break
        refused = "couldn't connect" in (result.stdout + result.stderr).lower()
        if not refused or attempt == CONNECT_TRIES:
            raise RuntimeError(_failure(result))
        time.sleep(1.0)
    try:
        reading = parse(result.stdout)
    except ParseError as exc:
        raise RuntimeError(f"{TOOL}: {exc}") from None
    return wire.encode(
        wire.ClientDone(device=args.device, port=args.port, gid_index=gid, reading=reading)
    )


HANDLERS = {wire.SERVER_START: server_start, wire.SERVER_STOP: server_stop, wire.CLIENT: client}
