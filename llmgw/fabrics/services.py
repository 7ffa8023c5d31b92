"""Deriving physical fabrics from what ports and subnet managers report.

The heartbeat's "ports" section (SECTION, llmgw.inventory.sections): stored
only when a node's ports or managers changed (their digest), inside that
heartbeat's durable transaction; counters ride on the node row and never
come here. Rebuilt idempotently from the report: no signals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from llmgw_agent.protocol.fabric_identity import fabric_identity, normalize_guid

from llmgw import events
from llmgw.database import rows
from llmgw.fabrics import managers, tasks
from llmgw.fabrics.choices import FabricKind, link_up
from llmgw.fabrics.models import PhysicalFabric, Port, SubnetManager
from llmgw.inventory.models import Node
from llmgw.inventory.sections import Section

GONE = managers.GONE
IDENTITY_FIELDS = (
    "device",
    "port",
    "link_layer",
    "state",
    "phys_state",
    "rate_gbps",
    "fabric",
    "roce_network",
)


def port_key(data: dict[str, Any]) -> dict[str, Any]:
    """What of a heartbeat's ports and managers can change a fabric: not the
    counters, which change every heartbeat and are kept on the node row."""
    ports = [
        {**{k: p.get(k) for k in IDENTITY_FIELDS}, "sm": (p.get("sm") or {}).get("guid")}
        for p in data.get("ports") or []
    ]
    managers = [
        {
            "port": e.get("port"),
            "master": e.get("master"),
            "managers": sorted(
                (m.get("guid"), m.get("state"), m.get("priority")) for m in e.get("managers") or []
            ),
        }
        for e in data.get("subnet_managers") or []
    ]
    return {"ports": ports, "managers": managers}


def is_active(port: dict[str, Any]) -> bool:
    return link_up(port.get("state"), port.get("phys_state"))


def _guid(text: Any) -> str:
    try:
        return normalize_guid(str(text)) if text else ""
    except ValueError:
        return ""


# Every manager's GUID and its fabric's identity, read for each report
# that changed: plain SQL, not the ORM's built again every time.
_KNOWN = (
    f"SELECT m.guid, f.identity FROM {SubnetManager._meta.db_table} m "
    f"JOIN {PhysicalFabric._meta.db_table} f ON f.id = m.fabric_id"
)


class Observer:
    """One heartbeat's ports and managers, as this node's observations: the
    fabric's records are worked out from every node's (llmgw.fabrics.managers)."""

    def __init__(self, node: Node, now: datetime) -> None:
        self.node, self.now = node, now
        # GUID -> fabric identity, as the fabric's records have it; this
        # report's own listings are added as they are read, so its ports
        # find the fabric its listing named.
        # Unordered, as the other keyed reads here: the models' orders join
        # the fabric (or the node) table only to sort.
        with connection.cursor() as cursor:
            cursor.execute(_KNOWN)
            self.known = dict(cursor.fetchall())
        self.fabrics: dict[str, PhysicalFabric] = {}
        self.seen: dict[str, managers.Seen] = {}
        self.listed_master: dict[int, str] = {}
        self.port_masters: dict[int, Counter[str]] = defaultdict(Counter)
        # Whether a listing named any manager: an empty one (the tools
        # failed this time) is no word on the managers at all.
        self.listed = False

    def fabric(self, identity: str, kind: str) -> PhysicalFabric:
        if identity not in self.fabrics:
            # Nearly always there already: read by a statement composed
            # once (llmgw.database.rows). The ORM's get_or_create composed
            # its SELECT anew for every report, a tenth of a joining node's
            # durable store.
            found = rows.read(PhysicalFabric, identity=identity)
            if found:
                fabric = found[0]
            else:
                fabric, created = PhysicalFabric.objects.get_or_create(
                    identity=identity, defaults={"kind": kind, "last_seen": self.now}
                )
                if created and kind == FabricKind.INFINIBAND:
                    transaction.on_commit(lambda pk=fabric.pk: tasks.sweep_soon(pk))
            self.fabrics[identity] = fabric
        return self.fabrics[identity]

    def listing(self, entry: dict[str, Any]) -> None:
        listed = [m for m in entry.get("managers") or [] if _guid(m.get("guid"))]
        if not listed:
            return
        self.listed = True
        fabric = self.fabric(fabric_identity(listed, self.known), FabricKind.INFINIBAND)
        for m in listed:
            guid = _guid(m["guid"])
            self.known[guid] = fabric.identity
            self.seen[guid] = managers.Seen(
                fabric, m.get("lid"), m.get("priority"), m.get("state") or ""
            )
        master = _guid(entry.get("master")) or next(
            (_guid(m["guid"]) for m in listed if m.get("state") == "MASTER"), ""
        )
        if master in self.seen:
            self.listed_master[fabric.pk] = master

    def port_fabric(self, p: dict[str, Any]) -> PhysicalFabric | None:
        if not is_active(p):
            return None
        if p.get("link_layer") == "Ethernet":
            network = p.get("roce_network")
            return self.fabric(f"roce:{network}", FabricKind.ROCE) if network else None
        sm = p.get("sm") or {}
        guid = _guid(sm.get("guid"))
        if not guid:
            return None  # up, but cannot say which fabric: kept apart
        identity = self.known.get(guid) or fabric_identity([guid], self.known)
        fabric = self.fabric(identity, FabricKind.INFINIBAND)
        if guid not in self.seen:
            self.known[guid] = identity
            self.seen[guid] = managers.Seen(
                fabric, sm.get("lid"), sm.get("priority"), sm.get("state") or "MASTER"
            )
        self.port_masters[fabric.pk][guid] += 1
        return fabric

    def claims(self) -> dict[int, str]:
        """The master this node names on each fabric: its ports' (read every
        heartbeat), or else its listing's (once a minute)."""
        claims = dict(self.listed_master)
        for fabric_id, counts in self.port_masters.items():
            claims[fabric_id] = managers.vote(counts, claims.get(fabric_id))
        return claims


def _port_fields(p: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {
        "link_layer": p.get("link_layer") or "",
        "state": p.get("state") or "",
        "phys_state": p.get("phys_state") or "",
        "rate_gbps": p.get("rate_gbps"),
        "rate_text": p.get("rate_text") or "",
        "node_guid": p.get("node_guid") or "",
        "port_guid": p.get("port_guid") or "",
        "declared_fabric": p.get("fabric") or "",
        "sm_guid": _guid((p.get("sm") or {}).get("guid")),
        "roce_network": p.get("roce_network") or "",
        "updated_at": now,
    }


def _store_ports(
    node: Node, observer: Observer, ports: list[dict[str, Any]], now: datetime
) -> None:
    """The node's Port rows as this report has them, a statement per table
    rather than per port: a node joining with 8 adapters cost 30 queries."""
    existing = {(row.device, row.port): row for row in rows.read(Port, node=node.pk)}
    fresh: dict[tuple[str, int], Port] = {}
    changed: dict[tuple[str, int], Port] = {}
    for p in ports:
        fabric = observer.port_fabric(p)
        fields = _port_fields(p, now)
        # A port that went down stays on the fabric it was last seen on (its
        # cable did not move), so the fabric counts it as down instead of
        # losing it and its node. Placement and the sweep only ever use
        # ports that are up; one up with no subnet manager is kept apart.
        if fabric is not None or is_active(p):
            fields["physical_fabric"] = fabric
        key = (p["device"], p["port"])
        row = existing.get(key)
        if row is None:
            fresh[key] = Port(node=node, device=key[0], port=key[1], **fields)
            continue
        for name, value in fields.items():
            setattr(row, name, value)
        changed[key] = row
    gone = [row.pk for key, row in existing.items() if key not in changed]
    if gone:
        Port.objects.filter(pk__in=gone).delete()
    if changed:
        columns = [*_port_fields({}, now), "physical_fabric"]
        Port.objects.bulk_update(list(changed.values()), columns)
    rows.insert(list(fresh.values()))


def observe(node: Node, data: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Store a node's ports and managers; returns node fields to update."""
    observer = Observer(node, now)
    for entry in data.get("subnet_managers") or []:
        observer.listing(entry)
    _store_ports(node, observer, data.get("ports") or [], now)
    managers.record(node, observer.seen, observer.claims(), observer.listed, now)
    if observer.fabrics:
        seen = sorted(fabric.pk for fabric in observer.fabrics.values())
        rows.seen_again(PhysicalFabric, "id", seen, now)
    events.publish("fabric_changed", node=node.name, fabric=None)
    if "fabrics_active" in data:
        active = sorted(set(data["fabrics_active"]))
    else:
        # The change flag can be lost with an undelivered heartbeat; the
        # ports themselves say the same thing every time.
        active = sorted(
            {p["fabric"] for p in data.get("ports") or [] if p.get("fabric") and is_active(p)}
        )
    return {"active_fabrics": active}


def _digest_keys(data: dict[str, Any]) -> dict[str, Any]:
    key = port_key(data)
    keys = {"ports_digest": key["ports"]}
    if key["managers"]:  # the listing comes once a minute: no listing is no word
        keys["managers_digest"] = key["managers"]
    return keys


def recorded(node: Node) -> dict[str, Any]:
    """The node's ports as stored, and the physical fabrics they are on
    with their subnet managers."""
    ports = list(Port.objects.filter(node=node).select_related("physical_fabric"))
    fabrics: dict[int, dict[str, Any]] = {}
    for p in ports:
        fab = p.physical_fabric
        if fab is not None and fab.pk not in fabrics:
            fabrics[fab.pk] = {
                "identity": fab.identity,
                "master_guid": fab.master_guid,
                "managers": sorted(m.guid for m in fab.managers.all()),
            }
    return {
        "ports": [
            {
                "device": p.device,
                "port": p.port,
                "state": p.state,
                "phys_state": p.phys_state,
                "declared_fabric": p.declared_fabric,
                "sm_guid": p.sm_guid,
                "physical_fabric": p.physical_fabric.identity if p.physical_fabric else None,
            }
            for p in ports
        ],
        "fabrics": list(fabrics.values()),
    }


SECTION = Section(
    name="ports",
    payload_keys=("ports",),
    columns=("ports_digest", "managers_digest"),
    key=_digest_keys,
    store=observe,
    recorded=recorded,
)
