from __future__ import annotations

from collections import defaultdict
from typing import Any

from llmgw.inventory.models import Gpu, Node
from llmgw.nvlink import domains


def node_cards() -> list[dict[str, Any]]:
    cards: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for g in Gpu.objects.all():
        cards[g.node_id].append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "class": g.gpu_class,
                "fabric": g.fabric,
                "missing": g.missing,
                "degraded": domains.degraded(g.fabric),
                "problem": domains.card_problem(g.fabric) if domains.domain_of(g.fabric) else "",
            }
        )
    return [
        {"name": n.name, "imex": n.imex, "gpus": cards[n.pk]}
        for n in Node.objects.only("name", "imex")
        if cards[n.pk]
    ]


def overview() -> dict[str, Any]:
    nodes = node_cards()
    built = domains.build(nodes)
    imex = {n["name"]: n["imex"] for n in nodes}
    out = []
    for did, domain in sorted(built.items()):
        cluster, _, clique = did.partition("/")
        out.append(
            {
                "id": did,
                "cluster_uuid": cluster,
                "clique_id": int(clique) if clique.isdigit() else clique,
                "trays": [
                    {
                        "node": t.node,
                        "joined": t.joined,
                        "imex_up": t.imex_up,
                        "imex": imex.get(t.node),
                        "held_out_because": t.reasons,
                        "gpus": t.cards,
                    }
                    for t in sorted(domain.trays, key=lambda t: t.node)
                ],
                "joined_trays": len(domain.joined_nodes),
                "gpus": sum(len(t.cards) for t in domain.trays),
                "joined_gpus": sum(len(t.cards) for t in domain.trays if t.joined),
            }
        )
    return {"domains": out}
