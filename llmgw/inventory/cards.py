"""One view of a GPU card, the same for every reader: placement, the NVLink
API, the console and the metrics.

A card's health, NVLink domain and problem are stored with its report
(llmgw.inventory.gpus); this only reads them. What depends on the clock
cannot be stored: how old the card's wear is comes from the stored times,
here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.conf import settings

from llmgw.inventory.gpus import wear_reported_at
from llmgw.inventory.models import Gpu, Node

# The node columns card_view reads: a reader that loads nodes with only()
# names at least these, or each node costs a query of its own.
NODE_FIELDS = ("name", "wear_reported_at", "wear_changed_at")
# Every column of a card, by attribute name (node_id, not node).
GPU_COLUMNS = tuple(f.attname for f in Gpu._meta.concrete_fields)


@dataclass(frozen=True)
class CardView:
    node: str
    index: int
    uuid: str
    name: str
    gpu_class: str
    memory_total_bytes: int | None
    ecc_uncorrected: int | None
    foreign_processes: int | None
    pci_bus_id: str
    numa_node: int | None
    nearest_adapter: str
    nearest_adapter_level: str
    missing: bool
    xids: dict[str, int] | None
    remapped_rows: dict[str, Any] | None
    pcie_replays: int | None
    nvlink_errors: list[dict[str, Any]] | None
    fabric: dict[str, Any] | None
    unhealthy_reason: str
    nvlink_domain: str | None
    nvlink_problem: str
    nvlink_degraded: bool
    # When the node last reported this card's wear; None if it never did.
    wear_reported_at: datetime | None

    @property
    def healthy(self) -> bool:
        return not self.unhealthy_reason

    @property
    def nvlink_joined(self) -> bool:
        """Whether the card is in the domain its fabric names."""
        return self.nvlink_domain is not None and not self.nvlink_problem and not self.missing

    def wear_age_s(self, now: datetime) -> float | None:
        if self.wear_reported_at is None:
            return None
        return max(0.0, (now - self.wear_reported_at).total_seconds())

    def wear_stale(self, now: datetime) -> bool | None:
        """Whether the card's wear is too old to pass off as current; None
        when it was never reported (unknown, not stale). Wear comes once a
        minute: one missed reading is forgiven."""
        age = self.wear_age_s(now)
        if age is None:
            return None
        return bool(age > 2 * settings.MEASUREMENT_MAX_AGE_S)


def card_view(gpu: Gpu | SimpleNamespace, node: Node) -> CardView:
    return CardView(
        node=node.name,
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        gpu_class=gpu.gpu_class,
        memory_total_bytes=gpu.memory_total_bytes,
        ecc_uncorrected=gpu.ecc_uncorrected,
        foreign_processes=gpu.foreign_processes,
        pci_bus_id=gpu.pci_bus_id,
        numa_node=gpu.numa_node,
        nearest_adapter=gpu.nearest_adapter,
        nearest_adapter_level=gpu.nearest_adapter_level,
        missing=gpu.missing,
        xids=gpu.xids,
        remapped_rows=gpu.remapped_rows,
        pcie_replays=gpu.pcie_replays,
        nvlink_errors=gpu.nvlink_errors,
        fabric=gpu.fabric,
        unhealthy_reason=gpu.unhealthy_reason,
        nvlink_domain=gpu.nvlink_domain,
        nvlink_problem=gpu.nvlink_problem,
        nvlink_degraded=gpu.nvlink_degraded,
        wear_reported_at=wear_reported_at(gpu, node),
    )


def card_views(
    nodes: Iterable[Node], gpus: Iterable[Gpu] | None = None
) -> dict[int, list[CardView]]:
    """Every card of these nodes by node pk, in index order. `gpus`: their
    rows when the caller already has them (prefetched); otherwise one query
    reads them, whatever the number of nodes."""
    by_pk = {n.pk: n for n in nodes}
    rows: Iterable[Gpu | SimpleNamespace]
    if gpus is None:
        # Each card's columns as plain values: building 40,000 Gpu instances
        # (a fleet of 5,000 eight-card nodes) was most of reading them.
        query = Gpu.objects.filter(node_id__in=list(by_pk)).order_by("node_id", "index")
        rows = (SimpleNamespace(**v) for v in query.values(*GPU_COLUMNS).iterator(chunk_size=2000))
    else:
        rows = gpus
    out: dict[int, list[CardView]] = {pk: [] for pk in by_pk}
    for gpu in rows:
        node = by_pk.get(gpu.node_id)
        if node is not None:
            out[gpu.node_id].append(card_view(gpu, node))
    for cards in out.values():
        cards.sort(key=lambda c: c.index)
    return out
