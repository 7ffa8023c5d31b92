"""Fat trees for ibsim, and running the real OFED tools against them.

``write_fat_tree`` writes a topology file in ibsim's format (an
ibnetdiscover-like text, ``/usr/share/doc/ibsim-utils/net-examples/``):
one leaf per rail, every leaf cabled to every spine, every spine to every
core, nodes ``nodeNNN`` with 2-4 adapters ``mlx5_K``, all at HDR (``w=2 e=4``,
4xHDR) except the cables it is told to train short, and optionally one
node's adapter plugged into another rail's leaf. ibsim insists both ends of a
cable carry the same ``w=``/``e=``, so a short cable is short at both ends.

``Simulator`` starts ``ibsim -s -n`` on its own socket name in a scratch
directory and runs tools through ``ibsim-run`` as one adapter would
(``SIM_HOST``), stopping ibsim by its PID.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

HDR = "w=2 e=4"  # 4x HDR, 200 Gb/s


@dataclass
class FatTree:
    """What was built, so a test can say what the analysis must find."""

    path: Path
    leaves: list[str]
    spines: list[str]
    cores: list[str]
    adapters: list[str]  # "nodeNNN mlx5_K"
    #: (switch-or-adapter name, port, peer name, peer port, "w=.. e=..") of short cables
    short: list[tuple[str, int, str, int, str]] = field(default_factory=list)
    #: (node, device, leaf it was plugged into) of the miswired adapter
    miswired: tuple[str, str, str] | None = None


def write_fat_tree(
    path: Path,
    *,
    adapters_per_node: tuple[int, ...] = (4, 4, 3, 2, 4, 3),
    spines: int = 2,
    cores: int = 2,
    uplinks: int = 1,
    short_uplink: str | None = "w=1 e=4",
    short_adapter: tuple[int, int, str] | None = (4, 1, "w=2 e=2"),
    miswire: tuple[int, int, int] | None = (3, 1, 2),
) -> FatTree:
    """Write the topology file and say what is in it.

    ``short_uplink``: the first leaf's first uplink trains at this instead of
    HDR (``w=1`` -> 1xHDR). ``short_adapter``: (node number, device, rate) for
    one adapter cable (``e=2`` -> 4xEDR). ``miswire``: (node number, device,
    rail) puts that adapter on the given rail's leaf instead of its own.
    """
    rails = max(adapters_per_node)
    leaf_names = [f"leaf{r:02d}" for r in range(rails)]
    spine_names = [f"spine{s + 1:02d}" for s in range(spines)]
    core_names = [f"core{c + 1:02d}" for c in range(cores)]
    # port lines per switch / adapter: name -> {port: (peer, peer_port, rate)}
    ports: dict[str, dict[int, tuple[str, int, str]]] = {}
    nports: dict[str, int] = {}

    def cable(a: str, ap: int, b: str, bp: int, rate: str) -> None:
        for x, xp, y, yp in ((a, ap, b, bp), (b, bp, a, ap)):
            slot = ports.setdefault(x, {})
            assert xp not in slot, f"{x}[{xp}] cabled twice"
            slot[xp] = (y, yp, rate)

    tree = FatTree(path, leaf_names, spine_names, core_names, [])
    next_port = dict.fromkeys(leaf_names, 1)
    for n, count in enumerate(adapters_per_node, 1):
        for d in range(count):
            name = f"node{n:03d} mlx5_{d}"
            tree.adapters.append(name)
            nports[name] = 1
            rail = d
            if miswire is not None and (miswire[0], miswire[1]) == (n, d):
                rail = miswire[2]
                tree.miswired = (f"node{n:03d}", f"mlx5_{d}", leaf_names[rail])
            leaf = leaf_names[rail]
            rate = HDR
            if short_adapter is not None and (short_adapter[0], short_adapter[1]) == (n, d):
                rate = short_adapter[2]
                tree.short.append((name, 1, leaf, next_port[leaf], rate))
            cable(name, 1, leaf, next_port[leaf], rate)
            next_port[leaf] += 1
    down = max(next_port.values()) - 1
    for li, leaf in enumerate(leaf_names):
        for si, spine in enumerate(spine_names):
            for u in range(uplinks):
                lp = down + 1 + si * uplinks + u
                sp = 1 + li * uplinks + u
                rate = HDR
                if short_uplink is not None and li == 0 and si == 0 and u == 0:
                    rate = short_uplink
                    tree.short.append((leaf, lp, spine, sp, rate))
                cable(leaf, lp, spine, sp, rate)
    for si, spine in enumerate(spine_names):
        for ci, core in enumerate(core_names):
            cable(spine, len(leaf_names) * uplinks + 1 + ci, core, 1 + si, HDR)
    for name, slot in ports.items():
        nports.setdefault(name, max(max(slot), 8))

    out: list[str] = [
        "# fat tree for ibsim, written by tests/fabrics/ibsim.py:write_fat_tree",
        "",
    ]
    for name in leaf_names + spine_names + core_names:
        out.append(f'Switch\t{max(nports[name], 36)} "{name}"')
        for p in sorted(ports.get(name, {})):
            peer, pp, rate = ports[name][p]
            out.append(f'[{p}]\t"{peer}"[{pp}]\t{rate}')
        out.append("")
    for name in tree.adapters:
        out.append(f'Hca\t1 "{name}"')
        peer, pp, rate = ports[name][1]
        out.append(f'[1]\t"{peer}"[{pp}]\t{rate}')
        out.append("")
    path.write_text("\n".join(out))
    return tree


class Simulator:
    """ibsim on a socket of its own, in a scratch directory; stop() kills it by PID."""

    def __init__(self, netfile: Path, workdir: Path, name: str | None = None) -> None:
        self.netfile = netfile
        self.workdir = workdir
        self.sockname = name or f"llmgw-{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"ibsim-{self.sockname}.log"

    def env(self, host: str) -> dict[str, str]:
        return {**os.environ, "IBSIM_SOCKNAME": self.sockname, "SIM_HOST": host}

    def start(self, timeout: float = 15.0) -> None:
        ibsim = shutil.which("ibsim")
        assert ibsim is not None
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [ibsim, "-s", "-n", str(self.netfile)],
                cwd=self.workdir,
                env={**os.environ, "IBSIM_SOCKNAME": self.sockname},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while b"Network simulator ready" not in self.log.read_bytes():
            if self.proc.poll() is not None:
                raise RuntimeError(f"ibsim exited {self.proc.returncode}: {self.log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ibsim not ready after {timeout}s: {self.log.read_text()}")
            time.sleep(0.05)
        time.sleep(1.5)  # LABS.md: allow ~1.5 s after ibsim starts before the first tool

    def run(self, *args: str, host: str = "node001 mlx5_0", timeout: float = 60) -> str:
        """Run a real tool as ``host`` sees the fabric; return its stdout."""
        ibsim_run = shutil.which("ibsim-run")
        assert ibsim_run is not None
        done = subprocess.run(
            [ibsim_run, *args],
            cwd=self.workdir,  # the tool drops a ./sys-<pid> folder here
            env=self.env(host),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} exited {done.returncode}: {done.stderr.decode(errors='replace')}"
            )
        return done.stdout.decode()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # by PID: never by name, other simulators may be running
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def capture(outdir: Path) -> list[Path]:
    """Run the real tools on the default fat tree and keep what they printed.

    ``python tests/fabrics/ibsim.py tests/data/ibsim`` regenerates the files;
    each starts with a ``#`` line saying how it was made.
    """
    import tempfile

    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        net = work / "fat-tree.net"
        write_fat_tree(net)
        with open(net, "a") as fh:  # an adapter with no cable: discovery cannot leave it
            fh.write('\nHca\t1 "lonely mlx5_0"\n\n')
        version = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "infiniband-diags"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        shutil.copy(net, outdir / "fat-tree.net")
        written.append(outdir / "fat-tree.net")
        runs = [
            ("fat-tree-ibnetdiscover.txt", ["ibnetdiscover"], "node001 mlx5_0"),
            ("fat-tree-ibnetdiscover-p.txt", ["ibnetdiscover", "-p"], "node001 mlx5_0"),
            ("fat-tree-ibnetdiscover-f.txt", ["ibnetdiscover", "-f"], "node003 mlx5_2"),
            ("lonely-ibnetdiscover.txt", ["ibnetdiscover"], "lonely mlx5_0"),
            ("lonely-ibnetdiscover-p.txt", ["ibnetdiscover", "-p"], "lonely mlx5_0"),
        ]
        with Simulator(net, work) as sim:
            for fname, args, host in runs:
                text = sim.run(*args, host=host)
                head = (
                    f"# SOURCE: real `{' '.join(args)}` (infiniband-diags {version}) run as "
                    f'SIM_HOST="{host}" via ibsim-run against `ibsim -s -n fat-tree.net` '
                    "(tests/fabrics/ibsim.py:capture, net file beside this one)\n"
                )
                (outdir / fname).write_text(head + text)
                written.append(outdir / fname)
    return written


if __name__ == "__main__":
    import sys

    for p in capture(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/ibsim")):
        print(p)
