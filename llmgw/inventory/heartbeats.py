"""Storing a heartbeat. The measurements go onto the node row; each section
(llmgw.inventory.sections) is stored by its own app, and only when it
changed. The inventory's own sections are at the end."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from llmgw import events
from llmgw.database import rows
from llmgw.database.atomic import atomic
from llmgw.inventory import gpus, heartbeat_batch, sections
from llmgw.inventory.choices import NodeState
from llmgw.inventory.models import Filesystem, ModelHolding, Node
from llmgw.inventory.sections import Section

log = logging.getLogger("llmgw.inventory")


def heartbeat(node: Node, data: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """Store one heartbeat from a node already authenticated."""
    answer = store_many([(node.name, node.credential_hash, data, now or timezone.now())])[0]
    if answer is None:  # the row went away under us: nothing to store
        return {"node": node.name, "state": NodeState.READY, "register": node.registered_at is None}
    return answer


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _digests(data: dict[str, Any]) -> dict[str, str]:
    """The digest of each section column this heartbeat brings."""
    out: dict[str, str] = {}
    for section in sections.registered():
        if any(key in data for key in section.payload_keys):
            for column, key in section.key(data).items():
                out[column] = _digest(key)
    return out


@dataclass(frozen=True, slots=True)
class Measured:
    """A node column the heartbeat replaces, stored with the node row in
    the batch's one statement (heartbeat_batch). `brings(data, digests)`:
    whether this heartbeat sets it (else it is left as stored);
    `value(data, now)`: to what. `copies`: a column whose value before
    the statement it takes instead."""

    column: str
    brings: Callable[[dict[str, Any], dict[str, str]], bool]
    value: Callable[[dict[str, Any], datetime], Any] = lambda data, now: now
    copies: str | None = None


def _any_of(*keys: str) -> Callable[[dict[str, Any], dict[str, str]], bool]:
    # An optional section of the protocol is absent, never null, when not sent.
    if len(keys) == 1:
        [key] = keys  # the commonest, and run for every heartbeat: no generator
        return lambda data, digests: key in data
    return lambda data, digests: any(key in data for key in keys)


def _sent(key: str, field: str | None = None) -> Callable[[dict[str, Any], datetime], Any]:
    if field is None:
        return lambda data, now: data[key]
    return lambda data, now: data[key].get(field)


def _load(index: int) -> Callable[[dict[str, Any], datetime], Any]:
    return lambda data, now: (data["cpu"].get("load") or [None, None, None])[index]


def _wear(data: dict[str, Any], digests: dict[str, str]) -> bool:
    # Unchanged wear writes no Gpu row, yet it is as current as the
    # heartbeat: without this a fault held for minutes would read stale.
    # The previous time dates the cards a changed report leaves out.
    return "gpu_health_digest" in digests


# Every node column a heartbeat writes with its row: the one list, read by
# the statement that stores them. A column named here is stored; one not
# named is not written by a heartbeat at all.
MEASURED: tuple[Measured, ...] = (
    Measured("last_heartbeat_at", lambda data, digests: True),
    Measured("collectors", _any_of("collectors"), _sent("collectors")),
    Measured("cpu_utilization_percent", _any_of("cpu"), _sent("cpu", "utilization_percent")),
    Measured("load1", _any_of("cpu"), _load(0)),
    Measured("load5", _any_of("cpu"), _load(1)),
    Measured("load15", _any_of("cpu"), _load(2)),
    Measured("memory_used_bytes", _any_of("memory"), _sent("memory", "used_bytes")),
    Measured("memory_available_bytes", _any_of("memory"), _sent("memory", "available_bytes")),
    Measured("measured_at", _any_of("cpu", "memory")),
    Measured("filesystems_reported_at", _any_of("filesystems")),
    Measured(
        "weights_probed",
        _any_of("weights"),
        lambda data, now: bool(data["weights"].get("probed")),
    ),
    Measured("telemetry_at", _any_of("gpus", "sensors")),
    Measured("gpu_telemetry", _any_of("gpus"), _sent("gpus")),
    Measured("sensors", _any_of("sensors"), _sent("sensors")),
    Measured("port_samples", _any_of("ports"), _sent("ports")),
    Measured("ports_at", _any_of("ports")),
    Measured("shard_samples", _any_of("shards"), _sent("shards")),
    Measured("engines", _any_of("engines"), _sent("engines")),
    Measured("engines_probed", _any_of("engines_probed"), _sent("engines_probed")),
    Measured("warnings", _any_of("warnings"), _sent("warnings")),
    Measured("notices", _any_of("notices"), _sent("notices")),
    Measured("wear_previously_reported_at", _wear, copies="wear_reported_at"),
    Measured("wear_reported_at", _wear),
)


def _measurements(data: dict[str, Any], now: datetime, digests: dict[str, str]) -> dict[str, Any]:
    """The node row's columns this heartbeat replaces."""
    return {
        m.column: None if m.copies else m.value(data, now)
        for m in MEASURED
        if m.brings(data, digests)
    }


# (node name, credential digest, heartbeat, when it arrived)
Incoming = tuple[str, str, dict[str, Any], datetime]


@dataclass(frozen=True, slots=True)
class Durable:
    """A heartbeat whose sections changed, or whose node comes back to
    Ready: its answer, to be sent only once `store()` (the node's own
    durable transaction) has committed."""

    answer: dict[str, Any]
    store: Callable[[], None]


def store_many(beats: Sequence[Incoming]) -> list[dict[str, Any] | None]:
    """Store heartbeats of distinct nodes, each authenticated by its
    credential's digest; each one's answer, or None where the credential is
    unknown or revoked (nothing of it written).

    A heartbeat that changes nothing but the measurements costs a share of
    one statement (heartbeat_batch): at 10,000 nodes every 10 s this is the
    hot path of the whole control plane. Changed sections, and a node
    coming back to Ready, are stored durably in a transaction of their own,
    here one after the other (the web process's Coalescer runs several at
    once: see store_batch)."""
    answers: list[dict[str, Any] | None] = []
    for stored in store_batch(beats):
        if isinstance(stored, Durable):
            stored.store()
            stored = stored.answer
        answers.append(stored)
    return answers


def store_batch(beats: Sequence[Incoming]) -> list[dict[str, Any] | Durable | None]:
    """store_many's one statement for all of `beats`, leaving each
    heartbeat's durable transaction, where it needs one, to the caller: a
    fleet's first heartbeats each store every section (a hundred times an
    unchanged one's work), and stored one after the other behind the batch
    they came in, they held up every heartbeat after them."""
    prepared = [_prepare(name, digest, data, at) for name, digest, data, at in beats]
    columns = [column for section in sections.registered() for column in section.columns]
    returned = [*_RETURNING, *columns]
    measured = tuple((m.column, m.copies) for m in MEASURED)
    rows = heartbeat_batch.update([beat for beat, _ in prepared], returned, measured)
    answers: list[dict[str, Any] | Durable | None] = []
    for (beat, digests), (_, _, data, _) in zip(prepared, beats, strict=True):
        row = rows.get(beat.name)
        answers.append(None if row is None else _settle(row, columns, data, digests, beat.at))
    return answers


def _prepare(
    name: str, credential_hash: str, data: dict[str, Any], now: datetime
) -> tuple[heartbeat_batch.Beat, dict[str, str]]:
    digests = _digests(data)
    fields = _measurements(data, now, digests)
    free = None
    if "filesystems" in data:
        # Free space changes on nearly every beat of a real disk: it is a
        # measurement, written with the node's row, not a changed section.
        free = [(fs["mount"], fs["free_bytes"]) for fs in data["filesystems"]]
    beat = heartbeat_batch.Beat(
        name, credential_hash, fields, free, now, data.get("desired_digest")
    )
    return beat, digests


def _settle(
    row: tuple[Any, ...],
    columns: list[str],
    data: dict[str, Any],
    digests: dict[str, str],
    now: datetime,
) -> dict[str, Any] | Durable:
    # Only whether registered_at is null matters.
    name, pk, state, registered_at, desired, desired_digest = row[: len(_RETURNING)]
    stored = dict(zip(columns, row[len(_RETURNING) :], strict=True))
    changed = {column: d for column, d in digests.items() if d != stored[column]}
    answer = {"node": name, "state": NodeState.READY, "register": registered_at is None}
    if desired is not None:  # None: the agent holds this desired state already
        # JSON comes back as text from a raw cursor on some backends.
        answer["desired"] = json.loads(desired) if isinstance(desired, str) else desired
    if desired_digest:
        answer["desired_digest"] = desired_digest
    if not changed and state == NodeState.READY:
        return answer

    def store() -> None:
        _store_changes(pk, data, changed, now)
        if state != NodeState.READY:
            log.info("node %s is Ready", name)

    return Durable(answer, store)


# Read back with every heartbeat, before the sections' digest columns.
_RETURNING = ("name", "id", "state", "registered_at", "desired", "desired_digest")


# The largest columns, the measurements the batch has just written: no
# section reads them, and reading them back decoded kilobytes of JSON for
# every node's first heartbeat. A store that did read one would load it.
_UNREAD = (
    "gpu_telemetry",
    "sensors",
    "port_samples",
    "shard_samples",
    "engines",
    "collectors",
    "warnings",
    "notices",
    "desired",
    "gpu_topology",
)


@atomic
def _store_changes(pk: int, data: dict[str, Any], digests: dict[str, str], now: datetime) -> None:
    # Locked and compared again: two heartbeats of one node racing must not
    # both replace its filesystems, and a node revoked since the UPDATE
    # above authenticated it must not be marked Ready.
    # A statement composed once (llmgw.database.rows): building the ORM's
    # took longer than running it.
    found = rows.read(Node, lock=True, defer=_UNREAD, id=pk)
    if not found:
        return
    [node] = found
    changes: dict[str, Any] = {}
    for section in sections.registered():
        mine = {column: d for column, d in digests.items() if column in section.columns}
        if any(getattr(node, column) != d for column, d in mine.items()):
            changes.update(section.store(node, data, now))
            changes.update(mine)
    if node.state != NodeState.READY and not node.revoked_at:
        changes["state"] = NodeState.READY
    if changes:
        rows.update(Node, pk, changes)
        events.publish("node_changed", node=node.name, changes=changes)


# --- the inventory's own sections --------------------------------------------


def _store_filesystems(node: Node, data: dict[str, Any], now: datetime) -> dict[str, Any]:
    rows.delete(Filesystem, node=node.pk)
    rows.insert(
        [
            Filesystem(
                node=node,
                mount=fs["mount"],
                device=fs.get("device") or "",
                fstype=fs.get("fstype") or "",
                shared=fs["shared"],
                free_bytes=fs["free_bytes"],
                total_bytes=fs["total_bytes"],
                dirs=fs.get("dirs") or [],
                reported_at=now,
            )
            for fs in data["filesystems"]
        ]
    )
    return {}


def _store_weights(node: Node, data: dict[str, Any], now: datetime) -> dict[str, Any]:
    rows.delete(ModelHolding, node=node.pk)
    rows.insert(
        [
            ModelHolding(node=node, model_name=m["name"], path=m["path"], shared=m["shared"])
            for m in data["weights"].get("models") or []
        ]
    )
    return {}


def _store_gpu_state(node: Node, data: dict[str, Any], now: datetime) -> dict[str, Any]:
    gpus.store_state(node, data["gpus"])
    return {}


def _gpu_health_key(data: dict[str, Any]) -> dict[str, Any]:
    health = gpus.health_key(data)
    return {} if health is None else {"gpu_health_digest": health}


# GPU state before health: the order they have always been stored in.
SECTIONS = (
    Section(
        name="filesystems",
        payload_keys=("filesystems",),
        columns=("filesystems_digest",),
        # Free space is a measurement (see _prepare), not what changed.
        key=lambda data: {
            "filesystems_digest": [
                {k: v for k, v in fs.items() if k != "free_bytes"} for fs in data["filesystems"]
            ]
        },
        store=_store_filesystems,
    ),
    Section(
        name="weights",
        payload_keys=("weights",),
        columns=("weights_digest",),
        key=lambda data: {"weights_digest": data["weights"]},
        store=_store_weights,
    ),
    Section(
        name="gpu state",
        payload_keys=("gpus",),
        columns=("gpu_state_digest",),
        key=lambda data: {"gpu_state_digest": gpus.state_key(data["gpus"])},
        store=_store_gpu_state,
    ),
    Section(
        name="gpu health",
        payload_keys=("gpus", *gpus.NODE_HEALTH),
        columns=("gpu_health_digest",),
        key=_gpu_health_key,
        store=gpus.store_health,
    ),
)
