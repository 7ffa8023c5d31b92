"""The data boundaries of docs/data-ownership.md, read from the code.

Import contracts say which app may import which; they cannot see an ORM
lookup that walks from one app's model into another's rows
(`Node.objects.filter(shards__replica__profile__power_w=...)` reads
serving's tables from inside facility), nor a statement that writes
another app's table. This module finds both, statically:

- a lookup (a string or keyword given to filter, values, annotate, F, Q,
  prefetch_related...) or a related manager (`node.shards.all()`) that
  goes through a relation declared by another app's model;
- a write to another app's table: raw SQL (INSERT INTO / UPDATE /
  DELETE FROM), a queryset write on a model imported from another app's
  models, or `save(update_fields=[...])` naming only another app's
  columns.

The apps at the top (console, metrics, cli, simulator) read everything by
design (docs/architecture.md) and are not checked for reads; nothing may
write another app's table, except the columns the document lists.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.apps import apps

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = (
    "accounts",
    "inventory",
    "catalog",
    "fabrics",
    "nvlink",
    "facility",
    "placement",
    "serving",
)
READERS = ("console", "metrics", "cli", "simulator")

# Calls whose keywords are lookups, and calls whose strings are (dict.get's
# are not: its string is a key).
KEYWORD_CALLS = frozenset(
    "filter exclude get get_or_create update_or_create annotate aggregate alias Q update create".split()
)
STRING_CALLS = frozenset(
    "values values_list select_related prefetch_related order_by only defer F Count Sum Max "
    "Min Avg Prefetch OuterRef distinct".split()
)
# A foreign key compared as a key (`node__in=`, `node=`) reads no row of
# the other app; a walk past it (`node__name`) does.
COMPARISONS = frozenset(
    "exact iexact in gt gte lt lte isnull range contains icontains startswith istartswith "
    "endswith iendswith regex iregex pk id".split()
)
WRITE_CALLS = frozenset(
    "update create get_or_create update_or_create bulk_create bulk_update delete".split()
)
RAW_WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?([a-z]+)_([a-z_]+)", re.I)


@dataclass(frozen=True)
class Relations:
    """Relation names (as lookups spell them) and the apps that declare them:
    the app of the model holding the foreign key, for both directions."""

    forward: dict[str, frozenset[str]]  # foreign keys joining two apps, by field name
    backward: dict[str, frozenset[str]]  # their reverse query names
    reverse: dict[str, frozenset[str]]  # and their related-manager names
    own: dict[str, frozenset[str]]  # every relation name an app declares
    fields: dict[str, frozenset[str]]  # every concrete column name an app's models have
    tables: dict[str, str]  # db table -> app


def relations() -> Relations:
    forward: dict[str, set[str]] = {}
    backward: dict[str, set[str]] = {}
    reverse: dict[str, set[str]] = {}
    own: dict[str, set[str]] = {}
    fields: dict[str, set[str]] = {}
    tables: dict[str, str] = {}
    for model in apps.get_models():
        if not model.__module__.startswith("llmgw."):
            continue
        app = model._meta.app_label
        tables[model._meta.db_table] = app
        fields.setdefault(app, set()).update(
            n for f in model._meta.concrete_fields for n in (f.name, f.attname)
        )
        for f in model._meta.get_fields():
            if not f.is_relation or f.related_model is None:
                continue
            other = f.related_model._meta.app_label
            declarer = other if f.auto_created else app
            names = {f.name}
            if f.auto_created:
                names.add(f.field.related_query_name())  # type: ignore[union-attr]
            own.setdefault(declarer, set()).update(names)
            if other != app:
                for name in names:
                    (backward if f.auto_created else forward).setdefault(name, set()).add(declarer)
                if f.auto_created:
                    reverse.setdefault(f.get_accessor_name(), set()).add(declarer)  # type: ignore[union-attr]

    def freeze(d: dict[str, set[str]]) -> dict[str, frozenset[str]]:
        return {k: frozenset(v) for k, v in d.items()}

    return Relations(
        freeze(forward), freeze(backward), freeze(reverse), freeze(own), freeze(fields), tables
    )


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def foreign_lookups(app: str, source: str, rel: Relations) -> Iterator[tuple[int, str]]:
    """(line, what) for each walk through a relation another app declares."""
    mine = rel.own.get(app, frozenset())

    def walks(lookup: str) -> str | None:
        parts = lookup.lstrip("-").split("__")
        for i, part in enumerate(parts):
            if part in mine:
                continue
            if (declarers := rel.backward.get(part)) and app not in declarers:
                return f"{part} ({', '.join(sorted(declarers))})"
            beyond = parts[i + 1] if i + 1 < len(parts) else None
            declarers = rel.forward.get(part)
            if declarers and app not in declarers and beyond not in COMPARISONS | {None}:
                return f"{part} ({', '.join(sorted(declarers))})"
        return None

    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        called = _name(node.func)
        spelled: list[object] = []
        if called in KEYWORD_CALLS:
            spelled += [k.arg for k in node.keywords if k.arg]
        if called in STRING_CALLS:
            spelled += [a.value for a in node.args if isinstance(a, ast.Constant)]
        for lookup in spelled:
            if isinstance(lookup, str) and (why := walks(lookup)) is not None:
                yield node.lineno, f"{lookup!r} walks {why}"
        manager = node.func.value if isinstance(node.func, ast.Attribute) else None
        if isinstance(manager, ast.Attribute) and (declarers := rel.reverse.get(manager.attr)):
            if app not in declarers:
                who = ", ".join(sorted(declarers))
                yield node.lineno, f".{manager.attr}.{called}() walks {manager.attr} ({who})"


def foreign_writes(app: str, source: str, rel: Relations) -> Iterator[tuple[int, str, str]]:
    """(line, table or app, columns) for each write to another app's data."""
    tree = ast.parse(source)
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(".models"):
            parts = (node.module or "").split(".")
            if parts[0] == "llmgw" and len(parts) == 3 and parts[1] != app:
                for alias in node.names:
                    imported[alias.asname or alias.name] = parts[1]
    mine = rel.fields.get(app, frozenset())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in RAW_WRITE.finditer(node.value):
                table = f"{match.group(1)}_{match.group(2)}".lower()
                owner = rel.tables.get(table)
                if owner is not None and owner != app:
                    yield node.lineno, table, _set_columns(node.value, match.end())
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr in WRITE_CALLS:
            root = _root(node.func.value)
            if isinstance(root, ast.Name) and root.id in imported:
                yield node.lineno, f"{imported[root.id]}.{root.id}", node.func.attr
        elif node.func.attr == "save":
            named = _update_fields(node)
            if named and not named <= mine:
                yield node.lineno, "save", ",".join(sorted(named - mine))


def _update_fields(call: ast.Call) -> set[str]:
    for k in call.keywords:
        if k.arg == "update_fields" and isinstance(k.value, ast.List | ast.Tuple | ast.Set):
            return {e.value for e in k.value.elts if isinstance(e, ast.Constant)}
    return set()


def _set_columns(sql: str, start: int) -> str:
    """The columns an UPDATE sets (its SET clause up to FROM/WHERE), or the
    statement's kind for INSERT and DELETE."""
    rest = sql[start:]
    m = re.match(
        r"(?:\s+AS\s+\w+|\s+\w+)?\s+SET\s+(.*?)(?:\bFROM\b|\bWHERE\b|$)", rest, re.S | re.I
    )
    if m is None:
        return "*"
    cols = re.findall(r"(?:^|,)\s*(\w+)\s*=", m.group(1))
    return ",".join(sorted(set(cols))) or "*"


def sources(app: str, migrations: bool = False) -> Iterator[Path]:
    """The app's modules; with `migrations`, its migrations too (a trigger
    a migration installs writes as the code does)."""
    top = ROOT / "llmgw" / app
    for path in sorted(top.rglob("*.py")):
        if migrations or "migrations" not in path.parts:
            yield path
