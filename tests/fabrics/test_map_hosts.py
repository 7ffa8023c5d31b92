"""The fabric map on the real DGX H100 dump, as operators' fabrics differ
from it: adapters whose node description was never set, a host with one
adapter, UFM and management hosts on the rail leaves' free ports, and a
fabric whose tiers mix rates."""

from __future__ import annotations

from typing import Any

from llmgw.fabrics.cli import render
from llmgw.fabrics.ibnetdiscover import parse
from llmgw.fabrics.topology import analyze

from .data import IBSIM, NDR

DGX = "b08-p1-dgx-08-c01"  # the real dump's DGX with HCA-5 and HCA-6 swapped


def _rewrite(text: str, host: str, description: str, sysimg: str | None = None) -> str:
    """The dump with ``host``'s adapters described as ``description DEVICE``
    (as the switches' side of each cable says too), and, given ``sysimg``,
    all of them in one machine: one system image GUID."""
    records = text.split("\n\n")
    for i, record in enumerate(records):
        if f'# "{host} ' in record and "\nCa\t" in f"\n{record}" and sysimg is not None:
            lines = record.splitlines()
            records[i] = "\n".join(
                f"sysimgguid={sysimg}" if line.startswith("sysimgguid=") else line for line in lines
            )
    return "\n\n".join(records).replace(f'"{host} ', f'"{description} ')


def _misaligned(r: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(m.get("host"), m["device"]): m for m in r["rail_misalignment"]}


def test_adapters_with_no_node_description_are_one_host_named_by_their_system_image_guid() -> None:
    """`localhost HCA-5` was printed as host None; its machine's adapters
    share a system image GUID, which names it until the description is set."""
    guid = "0xe09d730300859464"
    r = analyze(parse(_rewrite(NDR.read_text(), DGX, "localhost", guid)))
    mine = [a for a in r["adapters"] if a.get("host") == guid]
    assert sorted(a["device"] for a in mine) == ["HCA-1", "HCA-2", "HCA-5", "HCA-6"]
    assert {(a["node"], a["host_note"]) for a in mine} == {(None, "node description not set")}
    got = _misaligned(r)
    assert set(got) >= {(guid, "HCA-5"), (guid, "HCA-6")}
    assert got[(guid, "HCA-5")]["management"] is None  # a compute host, cabled wrong
    assert r["summary"]["misaligned_rails"] == 2
    text = render(r)
    assert f"  {guid} HCA-5: on MF0;B09-P1-IBLEAF-04-08:MQM9701/U1 (a HCA-6 leaf)" in text
    assert "; node description not set" in text
    assert "None" not in text, text


def test_a_host_with_one_adapter_is_not_off_its_rail() -> None:
    """A login node with one adapter on a rail leaf has no rails to keep apart."""
    text = NDR.read_text().replace('"localhost HCA-6"', '"login-01 HCA-1"')
    r = analyze(parse(text))
    assert [a["device"] for a in r["adapters"] if a["node"] == "login-01"] == ["HCA-1"]
    assert not [m for m in r["rail_misalignment"] if m["node"] == "login-01"]
    assert r["summary"]["misaligned_rails"] == 2


def test_ufm_and_management_hosts_off_the_rails_are_said_so_and_counted_apart() -> None:
    """Of the six adapters off their rail on the real dump, four are a UFM
    host's and a management host's, cabled to free leaf ports."""
    r = analyze(parse(NDR.read_text()))
    got = {k: m["management"] for k, m in _misaligned(r).items()}
    assert got == {
        ("B11-P1-CUFM-02", "mlx5_0"): "a UFM or management host, by its name",
        ("B11-P1-CUFM-02", "mlx5_1"): "a UFM or management host, by its name",
        ("ubuntu", "mlx5_0"): "a management host: 2 adapters where compute hosts have 4, "
        "none on its rail's leaf",
        ("ubuntu", "mlx5_1"): "a management host: 2 adapters where compute hosts have 4, "
        "none on its rail's leaf",
        (DGX, "HCA-5"): None,
        (DGX, "HCA-6"): None,
    }
    s = r["summary"]
    assert (s["misaligned_rails"], s["misaligned_management"]) == (2, 4)
    text = render(r)
    assert (
        "misaligned rails: 2 (and 4 adapters of UFM or management hosts, no rail members)" in text
    )
    assert (
        "B11-P1-CUFM-02 mlx5_0: on " in text and "; a UFM or management host, by its name" in text
    )


def test_a_tier_that_mixes_rates_is_reported_per_link() -> None:
    """spine03 is EDR among HDR spines, by design: the leaf-spine tier was
    printed as one rate (4xHDR), hiding its EDR links."""
    r = analyze(parse(IBSIM.joinpath("two-generations-ibnetdiscover.txt").read_text()))
    lines = render(r).splitlines()
    assert (
        "  leaf-spine: 4xHDR (200 Gb/s) on 7 links, 4xEDR (100 Gb/s) on 3 links, "
        "1xHDR (50 Gb/s) on 1 links, 1xEDR (25 Gb/s) on 1 links"
    ) in lines
    edr = sorted(line for line in lines if line.startswith("    4xEDR: leaf"))
    assert edr == [
        "    4xEDR: leaf00 [9] - spine03 [1]",
        "    4xEDR: leaf02 [9] - spine03 [3]",
        "    4xEDR: leaf03 [9] - spine03 [4]",
    ]
    assert "  spine-core: 4xHDR (200 Gb/s) on 4 links, 4xEDR (100 Gb/s) on 2 links" in lines
    assert "  adapter-leaf: 4xHDR (200 Gb/s)" in lines
