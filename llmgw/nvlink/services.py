from __future__ import annotations

from typing import Any

from llmgw import holdings
from llmgw.inventory.cards import NODE_FIELDS, CardView, card_views
from llmgw.inventory.models import Node
from llmgw.nvlink import domains


def node_cards() -> list[dict[str, Any]]:
    """Each node with cards: its pk, name, IMEX and its cards' views."""
    nodes = list(Node.objects.only(*NODE_FIELDS, "imex"))
    cards = card_views(nodes)
    return [
        {"pk": n.pk, "name": n.name, "imex": n.imex, "gpus": cards[n.pk]}
        for n in nodes
        if cards[n.pk]
    ]


def replicas_by_node(pks: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Node pk -> the replicas its shards serve, asked of serving
    (llmgw/holdings.py): which model, which replica, which of its GPUs."""
    out: dict[int, list[dict[str, Any]]] = {}
    for s in holdings.reader().replica_shards(pks):
        out.setdefault(s.node, []).append(
            {"id": s.replica, "model": s.model, "state": s.state, "gpus": list(s.gpus)}
        )
    return out


def card_row(card: CardView) -> dict[str, Any]:
    return {
        "index": card.index,
        "uuid": card.uuid,
        "class": card.gpu_class,
        "fabric": card.fabric,
        "missing": card.missing,
        "degraded": card.nvlink_degraded,
        "problem": card.nvlink_problem,
    }


def overview() -> dict[str, Any]:
    nodes = node_cards()
    built = domains.build(nodes)
    imex = {n["name"]: n["imex"] for n in nodes}
    pk = {n["name"]: n["pk"] for n in nodes}
    replicas = replicas_by_node([pk[t.node] for d in built.values() for t in d.trays])
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
                        "gpus": [card_row(c) for c in t.cards],
                        "replicas": replicas.get(pk[t.node], []),
                    }
                    for t in sorted(domain.trays, key=lambda t: t.node)
                ],
                "joined_trays": len(domain.joined_nodes),
                "gpus": sum(len(t.cards) for t in domain.trays),
                "joined_gpus": sum(len(t.cards) for t in domain.trays if t.joined),
            }
        )
    return {"domains": out}
