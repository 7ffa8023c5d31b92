"""Storing what agents say about GPUs: identity at registration, the
per-heartbeat samples on the node row, and wear and health on the Gpu rows
only when they change. Whatever writes a card's report works out its state
again (gpu_health.card_state) in the same write, always under the node's
lock, so a reader never finds the state behind the report."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from django.db import connection

from llmgw.database import rows
from llmgw.inventory.gpu_health import CARD_STATE, card_state
from llmgw.inventory.models import Gpu, Node

# Read once a minute by the agent; absent from the heartbeats in between.
WEAR = ("remapped_rows", "pcie_replays", "nvlink_errors", "fabric", "xids")
NODE_HEALTH = ("imex", "sxids", "xids_unattributed")


def _identity(gpu: dict[str, Any]) -> dict[str, Any]:
    adapter = gpu.get("nearest_adapter") or {}
    fields: dict[str, Any] = {
        "uuid": gpu.get("uuid") or "",
        "name": gpu.get("name") or "",
        "gpu_class": gpu.get("class") or "",
        "memory_total_bytes": gpu.get("memory_total_bytes"),
        "ecc_uncorrected": gpu.get("ecc_uncorrected"),
        "foreign_processes": gpu.get("foreign_processes"),
        "pci_bus_id": gpu.get("pci_bus_id") or "",
        "numa_node": gpu.get("numa_node"),
        "nearest_adapter": adapter.get("name") or "",
        "nearest_adapter_level": adapter.get("level") or "",
        "missing": gpu.get("error") == "lost",
    }
    for key in WEAR:
        if key in gpu:
            fields[key] = gpu[key]
    return fields


def register(node: Node, gpus: list[dict[str, Any]], has_cards: bool = True) -> None:
    """The node's cards as its registration lists them: a statement per
    kind of change rather than per card (a GPU node joining cost 30).
    `has_cards` False: the node has no Gpu rows (its registration's
    statement said so), so none are read."""
    existing = {g.index: g for g in _cards(node)} if has_cards else {}
    fresh: dict[int, Gpu] = {}
    fields: set[str] = set()
    for gpu in gpus:
        index, identity = gpu["index"], _identity(gpu)
        row = existing.get(index)
        if row is not None and identity["missing"]:
            # Keep what we knew of a card NVML can no longer open.
            identity = {"missing": True}
        if row is None:
            fresh[index] = Gpu(node=node, index=index, **identity)
            continue
        for key, value in identity.items():
            setattr(row, key, value)
        fields.update(identity)
    seen = {g["index"] for g in gpus}
    gone = [row.pk for index, row in existing.items() if index not in seen]
    if gone:
        Gpu.objects.filter(pk__in=gone).delete()
    kept = [row for index, row in existing.items() if index in seen]
    # A card registered again keeps the wear it had, so its state is worked
    # out from the whole row, not from what this registration said.
    for row in [*kept, *fresh.values()]:
        _update(row, {})
    _save(kept, fields | set(CARD_STATE))
    rows.insert(list(fresh.values()))


def _cards(node: Node) -> list[Gpu]:
    # Unordered: the model's order (node, index) joins the node table to
    # sort by its name, and every caller keys the cards by index. A
    # statement composed once (llmgw.database.rows), not the ORM's each time.
    return rows.read(Gpu, node=node.pk)


def _update(gpu: Gpu, changes: dict[str, Any]) -> set[str]:
    """Apply changes to the card, and the state they lead to; returns the
    columns that changed."""
    changed = {k for k, v in changes.items() if getattr(gpu, k) != v}
    for key, value in changes.items():
        setattr(gpu, key, value)
    for key, value in card_state(gpu).items():
        if getattr(gpu, key) != value:
            setattr(gpu, key, value)
            changed.add(key)
    return changed


def _save(gpus: list[Gpu], fields: set[str] | tuple[str, ...]) -> None:
    # One statement for all the cards, whatever their number.
    if not gpus or not fields:
        return
    _update_from_values(gpus, sorted(fields))


def _update_from_values(gpus: list[Gpu], names: list[str]) -> None:
    """bulk_update's statement as UPDATE ... FROM (VALUES ...): the same
    rows and values, each prepared by its model field as bulk_update
    prepares it. bulk_update builds a CASE of one WHEN per card for every
    column, and building those expressions was half of what a GPU node's
    first heartbeat cost the web process; this is a string and a list."""
    opts = Gpu._meta
    quote = connection.ops.quote_name
    fields = [opts.pk, *(opts.get_field(name) for name in names)]
    row = "(" + ", ".join(f"%s::{field.db_type(connection)}" for field in fields) + ")"
    params: list[Any] = []
    for gpu in gpus:
        params += [
            field.get_db_prep_save(getattr(gpu, field.attname), connection) for field in fields
        ]
    columns = [quote(field.column) for field in fields]
    sets = ", ".join(f"{column} = v.{column}" for column in columns[1:])
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(opts.db_table)} AS g SET {sets} "
            f"FROM (VALUES {', '.join([row] * len(gpus))}) AS v({', '.join(columns)}) "
            f"WHERE g.{columns[0]} = v.{columns[0]}",
            params,
        )


def state_key(gpus: list[dict[str, Any]]) -> list[Any]:
    """What on a heartbeat's cards can change whether they are free."""
    return [
        [
            g["index"],
            g.get("uuid"),
            g.get("ecc_uncorrected"),
            g.get("foreign_processes"),
            g.get("error"),
        ]
        for g in gpus
    ]


def health_key(data: dict[str, Any]) -> dict[str, Any] | None:
    """The minute's wear readings, or None when this heartbeat has none."""
    gpus = data.get("gpus") or []
    if not any(key in g for g in gpus for key in WEAR) and not any(k in data for k in NODE_HEALTH):
        return None
    return {
        "gpus": [{k: g[k] for k in ("index", *WEAR) if k in g} for g in gpus],
        **{k: data[k] for k in NODE_HEALTH if k in data},
    }


def store_state(node: Node, gpus: list[dict[str, Any]]) -> None:
    by_index = {g["index"]: g for g in gpus}
    changed: list[Gpu] = []
    fields: set[str] = set()
    for gpu in _cards(node):
        sample = by_index.get(gpu.index)
        changes: dict[str, Any] = {"missing": sample is None or sample.get("error") == "lost"}
        if sample is not None:
            for key in ("ecc_uncorrected", "foreign_processes"):
                if key in sample:
                    changes[key] = sample[key]
        if columns := _update(gpu, changes):
            changed.append(gpu)
            fields |= columns
    _save(changed, fields)


def store_health(node: Node, data: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Update the cards' wear; returns the node fields to update. A card
    the report leaves out keeps its wear, dated by the last report that had
    it."""
    cards = {g.index: g for g in _cards(node)}
    changed: dict[int, Gpu] = {}
    fields: set[str] = set()
    if node.wear_changed_at is not None and node.wear_previously_reported_at is not None:
        # The cards of the last change were in every report since (else one
        # would have changed the digest), the last of which came just before
        # this one: date them by it, then this report's cards by now.
        for gpu in cards.values():
            at = gpu.health_reported_at
            if at is not None and at >= node.wear_changed_at:
                gpu.health_reported_at = node.wear_previously_reported_at
                changed[gpu.index] = gpu
                fields.add("health_reported_at")
    for sample in data.get("gpus") or []:
        changes = {k: sample[k] for k in WEAR if k in sample}
        card = cards.get(sample["index"])
        if changes and card is not None:
            fields |= _update(card, {**changes, "health_reported_at": now})
            changed[card.index] = card
    _save(list(changed.values()), fields)
    return {**{k: data[k] for k in NODE_HEALTH if k in data}, "wear_changed_at": now}


def wear_reported_at(gpu: Gpu | SimpleNamespace, node: Node) -> datetime | None:
    """When the node last reported this card's wear; None if it never did.

    Reports that change nothing touch no Gpu row, only the node's
    wear_reported_at. They carry the same cards as the last report that
    did change something (else their digest would differ), so a card that
    report had is current as of wear_reported_at; a card it left out has
    not been reported since its own health_reported_at."""
    at: datetime | None = gpu.health_reported_at
    reported: datetime | None = node.wear_reported_at
    if at is None or node.wear_changed_at is None or reported is None:
        return at
    return max(at, reported) if at >= node.wear_changed_at else at
