"""A fat tree as ibsim's topology file, for running the real OFED tools on it.

``ibsim -s -n FILE`` reads an ibnetdiscover-like text
(``/usr/share/doc/ibsim-utils/net-examples/``): a ``Switch N "name"`` or
``Hca 1 "name"`` record, then one ``[port] "peer"[port] w=.. e=..`` line
per cable. ibsim insists both ends of a cable carry the same ``w=``/``e=``,
so every cable is written from both ends with its one rate, a short one short
at both. The cables are :func:`llmgw.simulator.fat_tree.cabling`'s, the same
that :mod:`llmgw.simulator.ibnetdiscover_dump` prints.
"""

from __future__ import annotations

from llmgw.simulator.fat_tree import FatTree, cabling

# ibsim's codes for the active link width (w=) and extended speed (e=), as the
# PortInfo attribute numbers them: "w=2 e=4" is 4xHDR.
WIDTH = {"1x": 1, "4x": 2, "8x": 4, "12x": 8}
EXTENDED_SPEED = {"FDR": 1, "EDR": 2, "HDR": 4}  # ibsim hangs on NDR


def ibsim_rate(rate: str) -> str:
    """``"4xHDR"`` -> ``"w=2 e=4"``; ValueError for what ibsim cannot cable."""
    width, x, speed = rate.partition("x")
    if not x or width + x not in WIDTH or speed not in EXTENDED_SPEED:
        raise ValueError(f"ibsim cannot cable a link at {rate!r}")
    return f"w={WIDTH[width + x]} e={EXTENDED_SPEED[speed]}"


def net_file(tree: FatTree) -> str:
    """The topology file of ``tree``; a switch has at least ``switch_ports`` ports."""
    c = cabling(tree)
    names = c.names()
    ports = c.ports()
    out = ["# fat tree for ibsim, written by llmgw/simulator/ibsim_net.py", ""]
    for sw in c.switches:
        out.append(f'Switch\t{max(sw.nports, tree.switch_ports)} "{sw.name}"')
        for port, peer, rate in ports[sw.guid]:
            out.append(f'[{port}]\t"{names[peer.guid]}"[{peer.port}]\t{ibsim_rate(rate)}')
        out.append("")
    for ad in c.adapters:
        [(_, leaf, rate)] = ports[ad.guid]
        # ibsim keeps the quoted name as the node's id (cables name it) and
        # reports the "# ..." after it as the node description
        desc = tree.descriptions.get((ad.host, ad.device))
        out += [
            f'Hca\t1 "{ad.name}"' + (f'\t# "{desc}"' if desc else ""),
            f'[1]\t"{names[leaf.guid]}"[{leaf.port}]\t{ibsim_rate(rate)}',
            "",
        ]
    return "\n".join(out)
