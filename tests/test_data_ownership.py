"""The code keeps to docs/data-ownership.md: each table written by its own
app, no ORM lookup through another app's relations, and the Node columns
other apps decide listed with their owner."""

from __future__ import annotations

import re
import textwrap

import pytest

from tests import ownership

DOC = ownership.ROOT / "docs" / "data-ownership.md"


def _doc_rows(heading: str) -> list[list[str]]:
    text = DOC.read_text()
    part = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in part.splitlines():
        cells = [c.replace("`", "").strip() for c in line.strip().strip("|").split("|")]
        if (
            line.startswith("|")
            and not set(cells[0]) <= {"-"}
            and cells[0] not in {"table", "column"}
        ):
            rows.append(cells)
    return rows


@pytest.fixture(scope="module")
def rel() -> ownership.Relations:
    return ownership.relations()


def test_every_table_is_listed_with_its_owner(rel: ownership.Relations) -> None:
    listed = {row[0]: row[1] for row in _doc_rows("Tables and their owners")}
    assert listed == rel.tables


def test_no_app_walks_another_apps_relations(rel: ownership.Relations) -> None:
    found = [
        f"{path.relative_to(ownership.ROOT)}:{line}: {what}"
        for app in ownership.DOMAIN
        for path in ownership.sources(app)
        for line, what in ownership.foreign_lookups(app, path.read_text(), rel)
    ]
    assert not found, "ask the owning app (docs/data-ownership.md):\n" + "\n".join(found)


def test_no_app_writes_another_apps_table(rel: ownership.Relations) -> None:
    allowed = {(row[0], row[1]) for row in _doc_rows("Writes to another app's table")}
    found = [
        f"{path.relative_to(ownership.ROOT)}:{line}: {table} {columns}"
        for app in ownership.DOMAIN + ownership.READERS
        for path in ownership.sources(app, migrations=True)
        for line, table, columns in ownership.foreign_writes(app, path.read_text(), rel)
        if (table, columns) not in allowed
    ]
    assert not found, "call the owning app's function (docs/data-ownership.md):\n" + "\n".join(
        found
    )


def test_node_columns_decided_elsewhere_are_listed_with_their_owner() -> None:
    from llmgw.inventory import sections

    listed = {row[0]: (row[1], row[2]) for row in _doc_rows("Node columns other apps decide")}
    for section in sections.registered():
        app = section.store.__module__.split(".")[1]
        if app == "inventory":
            continue
        for column in section.columns:
            assert listed.get(column) == (app, f"the heartbeat's {section.name} section"), column


# The checker itself: each kind of breach put back is found.

PUT_BACK = {
    "reverse": ("Node.objects.filter(shards__replica__profile__power_w__isnull=False)", "shards"),
    "manager": ("node.network_ports.select_related('physical_fabric')", "network_ports"),
    "values": ('rows.values("pk", "gpu_claims__index")', "gpu_claims"),
    "forward": ('Port.objects.filter(node__name="n1")', "node"),
}


@pytest.mark.parametrize("kind", sorted(PUT_BACK))
def test_a_lookup_put_back_is_found(rel: ownership.Relations, kind: str) -> None:
    code, relation = PUT_BACK[kind]
    found = list(ownership.foreign_lookups("placement", code, rel))
    assert found and relation in found[0][1]


def test_keys_compared_and_own_relations_are_not_lookups_through_others(
    rel: ownership.Relations,
) -> None:
    code = textwrap.dedent("""
        Port.objects.filter(node__in=mine, node_id=3)
        sw.get("node")
    """)
    assert not list(ownership.foreign_lookups("placement", code, rel))
    assert not list(
        ownership.foreign_lookups("serving", "Node.objects.filter(shards__rank=0)", rel)
    )


def test_a_write_put_back_is_found(rel: ownership.Relations) -> None:
    code = textwrap.dedent('''
        from llmgw.facility.models import Hold
        SQL = """UPDATE inventory_node AS n SET desired = v.gpu FROM (VALUES (1)) v WHERE n.id = v.id"""
        Hold.objects.filter(domain="x").update(progress="")
        hold.save(update_fields=["progress", "moving"])
    ''')
    found = {
        (table, columns) for _, table, columns in ownership.foreign_writes("serving", code, rel)
    }
    assert found == {
        ("inventory_node", "desired"),
        ("facility.Hold", "update"),
        ("save", "moving,progress"),
    }
    assert re.search("inventory_node", DOC.read_text().split("## Writes to another")[1]) is None
