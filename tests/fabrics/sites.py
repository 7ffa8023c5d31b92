"""Fabrics as real sites have them, as ibsim trees, and what the map must
say of each: a spine upgrade half done, adapters named the ways vendors and
installers name them, a storage leaf, and miscabling.

Each site is a tree (:func:`tests.fabrics.ibsim.ibsim_tree`), the adapter
discovery runs from, and a check of the analysis. ``test_real_sites`` runs
the real ibnetdiscover on ibsim for each; ``test_site_captures`` checks the
dumps :func:`capture` kept under tests/data/ibsim, for machines without ibsim.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from llmgw.simulator.fat_tree import FatTree

from .ibsim import Simulator, diags_version, ibsim_tree, short_ends, write_net


class Site(NamedTuple):
    name: str
    tree: FatTree
    host: str
    check: Callable[[dict[str, Any]], None]


def _degraded(r: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {
        (d["a"]["description"], d["a"]["port"], d["b"]["description"], d["b"]["port"])
        + (d["rate_text"], d["expected_rate_text"])
        for d in r["degraded_links"]
    }


# spines 01 and 02 HDR, spine03 the older EDR: both rates correct by design.
# Two cables really trained short, one to each generation.
TWO_GENERATIONS = ibsim_tree(
    spines=3,
    spine_rates={2: "4xEDR"},
    short_uplinks={(1, 2): "1xEDR"},
    short_adapter=None,
    miswire=None,
)
TWO_GENERATIONS_SHORT = {
    ("leaf00", 7, "spine01", 1, "1xHDR", "4xHDR"),
    ("leaf01", 9, "spine03", 2, "1xEDR", "4xEDR"),
}


def check_two_generations(r: dict[str, Any]) -> None:
    assert short_ends(TWO_GENERATIONS) == {(a, ap) for a, ap, *_ in TWO_GENERATIONS_SHORT}
    assert _degraded(r) == TWO_GENERATIONS_SHORT
    edr = [k for k in r["links"] if k["rate_text"] == "4xEDR"]
    assert len(edr) == 3 + 2  # leaf-spine03 and spine03-core


_NAMES: dict[int, Callable[[int], str]] = {
    1: lambda d: f"dgx-a12 HCA-{d + 1}",  # DGX OS: HCA-N, 1-based
    2: lambda d: f"gpu-01 mlx5_{d}",
    3: lambda d: f"localhost mlx5_{d}",  # set before the hostname was
    4: lambda d: f"localhost mlx5_{d}",
    5: lambda d: f"HCA-{d + 1}",  # no hostname at all
}
_PER_NODE = (4, 4, 3, 2, 4, 3)
VENDOR_NAMES = ibsim_tree(
    adapters_per_node=_PER_NODE,
    short_uplink=None,
    short_adapter=None,
    miswire=(4, 1, 2),  # the second "localhost"'s mlx5_1 on rail 2's leaf
    descriptions={
        (f"node{n:03d}", f"mlx5_{d}"): name(d)
        for n, name in _NAMES.items()
        for d in range(_PER_NODE[n - 1])
    },
)


def check_vendor_names(r: dict[str, Any]) -> None:
    got = {a["description"]: (a["node"], a["device"], a["rail"]) for a in r["adapters"]}
    assert got["dgx-a12 HCA-1"] == ("dgx-a12", "HCA-1", 0)
    assert got["dgx-a12 HCA-4"] == ("dgx-a12", "HCA-4", 3)
    assert got["gpu-01 mlx5_3"] == ("gpu-01", "mlx5_3", 3)
    assert got["localhost mlx5_2"] == (None, "mlx5_2", 2)  # not one host "localhost"
    assert got["HCA-3"] == (None, "HCA-3", 2)
    assert got["node006 mlx5_2"] == ("node006", "mlx5_2", 2)
    leaf = {s["guid"]: s["description"] for s in r["switches"]}
    rail_of = {s["description"]: s["rail_index"] for s in r["switches"]}
    assert [rail_of[f"leaf0{i}"] for i in range(4)] == [0, 1, 2, 3]
    mis = [
        (m["node"], m["device"], m["rail"], leaf[m["leaf_guid"]], m["leaf_rail"])
        for m in r["rail_misalignment"]
    ]
    assert mis == [(None, "mlx5_1", 1, "leaf02", 2)]
    assert [leaf[g] for g in r["rail_misalignment"][0]["expected_leaf_guids"]] == ["leaf01"]
    assert r["summary"]["rail_optimised"] is True


def storage_tree(leaf_name: str) -> FatTree:
    # stor01 has two adapters, stor02 and stor03 one: the leaf is mostly mlx5_0s,
    # but it is no second rail-0 leaf, and stor01's mlx5_1 is not misplaced
    return ibsim_tree(
        short_uplink=None, short_adapter=None, storage=(2, 1, 1), storage_leaf=leaf_name
    )


def check_storage(r: dict[str, Any], leaf_name: str) -> None:
    leaf = {s["guid"]: s["description"] for s in r["switches"]}
    tiers = {s["description"]: (s["tier"], s["rail_index"]) for s in r["switches"]}
    assert tiers[leaf_name] == ("leaf", None)
    assert [tiers[f"leaf0{i}"] for i in range(4)] == [("leaf", i) for i in range(4)]
    mis = [(m["node"], m["device"], leaf[m["leaf_guid"]]) for m in r["rail_misalignment"]]
    assert mis == [("node003", "mlx5_1", "leaf02")]  # the one real miswiring
    stor = [a for a in r["adapters"] if (a["node"] or "").startswith("stor")]
    assert len(stor) == 4 and {leaf[a["leaf_guid"]] for a in stor} == {leaf_name}
    assert r["summary"]["rail_aligned_share"] == round(19 / 20, 4)


MISCABLED = ibsim_tree(
    spines=3,
    uplinks=2,
    short_uplink=None,
    short_adapter=None,
    miswire=None,
    leaf_links=((0, 3),),  # leaf00 port 13 - leaf03 port 13
    pulled_uplinks=((2, 1),),  # leaf02 port 9 - spine02 port 5: down
)


def check_miscabled(r: dict[str, Any]) -> None:
    got = {
        (p["code"], p["a"]["description"], p["a"]["port"], p["b"]["description"], p["b"]["port"])
        for p in r["problems"]
    }
    assert got == {
        ("leaf-to-leaf", "leaf00", 13, "leaf03", 13),
        ("port-down", "leaf02", 9, "spine02", 5),
    }
    assert all(p["message"] for p in r["problems"])
    assert r["summary"]["problems"] == 2
    assert r["degraded_links"] == [] and r["rail_misalignment"] == []


HEALTHY = ibsim_tree(spines=3, uplinks=2, short_uplink=None, short_adapter=None, miswire=None)


def check_healthy(r: dict[str, Any]) -> None:
    assert r["problems"] == [] and r["degraded_links"] == []


SITES = [
    Site("two-generations", TWO_GENERATIONS, "node001 mlx5_0", check_two_generations),
    Site("vendor-names", VENDOR_NAMES, "node006 mlx5_0", check_vendor_names),
    Site(
        "storage-leaf",
        storage_tree("leaf04"),
        "node001 mlx5_0",
        lambda r: check_storage(r, "leaf04"),
    ),
    Site(
        "mgmt-leaf",
        storage_tree("mgmt-sw01"),
        "node001 mlx5_0",
        lambda r: check_storage(r, "mgmt-sw01"),
    ),
    Site("miscabled", MISCABLED, "node001 mlx5_0", check_miscabled),
    Site("healthy-two-uplinks", HEALTHY, "node001 mlx5_0", check_healthy),
]


def discover(site: Site, workdir: Path) -> list[str]:
    """The real ``ibnetdiscover`` and ``ibnetdiscover -p`` on ``site`` under ibsim."""
    with Simulator(write_net(site.tree, workdir / f"{site.name}.net"), workdir) as sim:
        return [
            sim.run("ibnetdiscover", host=site.host),
            sim.run("ibnetdiscover", "-p", host=site.host),
        ]


def capture(outdir: Path) -> list[Path]:
    """Keep each site's net file and dumps under ``outdir``.

    ``python -m tests.fabrics.sites tests/data/ibsim`` regenerates them.
    """
    version = diags_version()
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as scratch:
        for site in SITES:
            work = Path(scratch)
            texts = discover(site, work)
            shutil.copy(work / f"{site.name}.net", outdir / f"{site.name}.net")
            written.append(outdir / f"{site.name}.net")
            for suffix, args, text in zip(
                ("", "-p"), ("ibnetdiscover", "ibnetdiscover -p"), texts, strict=True
            ):
                path = outdir / f"{site.name}-ibnetdiscover{suffix}.txt"
                path.write_text(
                    f"# SOURCE: real `{args}` (infiniband-diags {version}) run as "
                    f'SIM_HOST="{site.host}" via ibsim-run against `ibsim -s -n '
                    f"{site.name}.net` (tests/fabrics/sites.py:capture)\n" + text
                )
                written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for p in capture(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/ibsim")):
        print(p)
