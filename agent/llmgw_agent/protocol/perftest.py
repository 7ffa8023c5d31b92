"""The fabric test's requests on the command stream and the answers to them.

`llmgw ctl fabric-test A B` has B's agent start an `ib_write_bw` server and
A's run the client against it, one rail at a time. The control plane decodes
the answers with these structs, so a number that does not fit its bounds is
refused where it arrives, never stored or graded.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

SERVER_START = "perftest-server-start"
SERVER_STOP = "perftest-server-stop"
CLIENT = "perftest-client"
KINDS = (SERVER_START, SERVER_STOP, CLIENT)
# What an agent lists in its registration's features when it answers them all.
FEATURES = tuple(f"command:{kind}" for kind in KINDS)

# "mlx5_0": what sysfs names an RDMA device; nothing a shell would read.
Device = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
IbPort = Annotated[int, Meta(ge=1, le=255)]
TcpPort = Annotated[int, Meta(ge=1024, le=65535)]
# An IPv4/IPv6 address or a host name: ib_write_bw's TCP exchange runs to it.
Host = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.:-]{1,253}$")]
# The agent's command runner stops any command after 30 s: a run plus its setup fits.
DurationS = Annotated[int, Meta(ge=1, le=20)]
SizeBytes = Annotated[int, Meta(ge=1, le=1 << 30)]
Gbps = Annotated[float, Meta(ge=0, le=100_000)]
GidIndex = Annotated[int, Meta(ge=0, le=1023)]


class ServerArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    device: Device
    port: IbPort = 1
    tcp_port: TcpPort
    duration_s: DurationS = 5
    size: SizeBytes = 65536


class ClientArgs(ServerArgs, kw_only=True, forbid_unknown_fields=True):
    server: Host


class StopArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tcp_port: TcpPort
    # How long to wait for a server still finishing its run.
    wait_s: Annotated[float, Meta(ge=0, le=120)] = 10.0


class Reading(msgspec.Struct, kw_only=True):
    """One row of perftest's result table, converted to Gb/s (decimal)."""

    bytes: Annotated[int, Meta(ge=1)]
    iterations: Annotated[int, Meta(ge=0)] | None = None
    bw_peak_gbps: Gbps | None = None
    bw_average_gbps: Gbps
    msg_rate_mpps: Annotated[float, Meta(ge=0)] | None = None
    # The unit the table printed ("Gb/sec", "MB/sec"), for whoever doubts the conversion.
    unit: Annotated[str, Meta(max_length=16)]


class ServerStarted(msgspec.Struct, kw_only=True):
    device: Device
    port: IbPort
    tcp_port: TcpPort
    # None on an InfiniBand port: perftest addresses it by LID, not by GID.
    gid_index: GidIndex | None = None
    simulated: bool = False


class ServerStopped(msgspec.Struct, kw_only=True):
    tcp_port: TcpPort
    finished: bool
    reading: Reading | None = None
    error: Annotated[str, Meta(max_length=2000)] | None = None
    simulated: bool = False


class ClientDone(msgspec.Struct, kw_only=True):
    device: Device
    port: IbPort
    gid_index: GidIndex | None = None
    reading: Reading
    simulated: bool = False


def encode(answer: ServerStarted | ServerStopped | ClientDone) -> str:
    return msgspec.json.encode(answer).decode()
