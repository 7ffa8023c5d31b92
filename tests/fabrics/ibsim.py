"""Fat trees on ibsim, and running the real OFED tools against them.

:func:`ibsim_tree` is the product's fat tree (llmgw/simulator/fat_tree.py)
the OFED tests run on, written for ibsim by
:func:`llmgw.simulator.ibsim_net.net_file`: one leaf per rail, every leaf
cabled to every spine, every spine to every core, nodes ``nodeNNN`` with 2-4
adapters ``mlx5_K``, all at HDR (ibsim hangs on NDR) except the cables it is
told to train short, and optionally one node's adapter plugged into another
rail's leaf.

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
from dataclasses import replace
from pathlib import Path

from llmgw.simulator.fat_tree import FatTree, SwitchNames, cabling, numbered_hosts
from llmgw.simulator.ibsim_net import net_file

NAMES = SwitchNames(leaf="leaf{rail:02d}", spine="spine{n:02d}", core="core{n:02d}")


def ibsim_tree(
    *,
    adapters_per_node: tuple[int, ...] = (4, 4, 3, 2, 4, 3),
    spines: int = 2,
    cores: int = 2,
    uplinks: int = 1,
    short_uplink: str | None = "1xHDR",
    short_adapter: tuple[int, int, str] | None = (4, 1, "4xEDR"),
    miswire: tuple[int, int, int] | None = (3, 1, 2),
    spine_rates: dict[int, str] | None = None,
    short_uplinks: dict[tuple[int, int], str] | None = None,
    descriptions: dict[tuple[str, str], str] | None = None,
    storage: tuple[int, ...] = (),
    storage_leaf: str = "storage01",
    leaf_links: tuple[tuple[int, int], ...] = (),
    pulled_uplinks: tuple[tuple[int, int], ...] = (),
) -> FatTree:
    """The tree, all its nodes under one leaf per rail.

    ``short_uplink``: the first leaf's first uplink trains at this instead of
    4xHDR. ``short_adapter``: (node number, device, rate) for one adapter
    cable. ``miswire``: (node number, device, rail) puts that adapter on the
    given rail's leaf instead of its own. ``spine_rates``: spine index -> the
    rate its cables are built for (spines of two generations);
    ``short_uplinks``: (leaf index, spine index) -> rate, more short uplinks.
    ``descriptions``: (node, device) -> the node description it reports.
    ``storage``: adapters of each host ``storNN`` on one more leaf, ``storage_leaf``.
    ``leaf_links``: (leaf, leaf) cables; ``pulled_uplinks``: (leaf, spine) cables left out.
    """
    hosts = numbered_hosts(adapters_per_node, name="node{:03d}", first=1)
    short: dict[tuple[str, str | int, str | int], str] = {}
    if short_uplink is not None:
        short[("uplink", 0, 0)] = short_uplink
    for (leaf, spine), rate in (short_uplinks or {}).items():
        short[("uplink", leaf, spine)] = rate
    if short_adapter is not None:
        node, device, rate = short_adapter
        short[("adapter", f"node{node:03d}", f"mlx5_{device}")] = rate
    miswired = {}
    if miswire is not None:
        miswired[(f"node{miswire[0]:03d}", f"mlx5_{miswire[1]}")] = miswire[2]
    return FatTree(
        "ibsim",
        hosts,
        hosts_per_leaf=len(hosts),
        spines=spines,
        cores=cores,
        rate="4xHDR",
        # 36-port switches, uplinks right after the adapters (port 7 of leaf00)
        switch_ports=36,
        leaf_down_ports=0,
        uplinks=uplinks,
        names=NAMES,
        short=short,
        miswired=miswired,
        spine_rates=spine_rates or {},
        descriptions=descriptions or {},
        storage_hosts=numbered_hosts(storage, guid=0xE09D730400000000, name="stor{:02d}", first=1),
        storage_leaf=storage_leaf,
        leaf_links=leaf_links,
        pulled_uplinks=frozenset(pulled_uplinks),
    )


def write_net(tree: FatTree, path: Path) -> Path:
    path.write_text(net_file(tree))
    return path


def tiers(tree: FatTree) -> dict[str, str]:
    """Switch name -> the tier it was built as."""
    return {s.name: s.tier for s in cabling(tree).switches}


def short_ends(tree: FatTree) -> set[tuple[str, int]]:
    """(name, port) of the lower end of each cable that trains short of what it
    was built for."""
    c = cabling(tree)
    built = cabling(replace(tree, short={})).cables
    names = c.names()
    return {
        (names[k.a.guid], k.a.port)
        for k, b in zip(c.cables, built, strict=True)
        if k.rate != b.rate
    }


def miswired(tree: FatTree) -> list[tuple[str, str, str]]:
    """(node, device, leaf it was plugged into) of each miswired adapter."""
    index = {h.name: i for i, h in enumerate(tree.hosts)}
    return [
        (host, device, tree.leaf_name(tree.leaf_of(index[host], device)))
        for host, device in tree.miswired
    ]


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
        net = write_net(ibsim_tree(), work / "fat-tree.net")
        with open(net, "a") as fh:  # an adapter with no cable: discovery cannot leave it
            fh.write('\nHca\t1 "lonely mlx5_0"\n\n')
        version = diags_version()
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


def diags_version() -> str:
    """The infiniband-diags that made a capture, for its header line."""
    return subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "infiniband-diags"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
