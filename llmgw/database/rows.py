"""Rows read or written by one plain statement, composed once for each
shape: a keyed read, bulk_create's INSERT and update()'s UPDATE, for the
paths a fleet joining runs thousands of times a minute; and a queryset's
values for every node or a few (values()), for the warm fleet's reads.

The ORM composes its statement anew on every call. For a node joining
(its registration's GPU rows, its first heartbeat's filesystems, weights
and ports, the node row's changes) composing was most of what these
statements cost the web process: a GPU node's first heartbeat spent more
building its SQL than PostgreSQL spent running it. The columns and their
values still come from the models (each field's pre_save and its
conversion for the database, as bulk_create and update() use them; each
column read converted back as a queryset converts it), so a field added
to a model is read and written here too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any, TypeVar

from django.db import connection
from django.db.models import F, Field, Lookup, QuerySet, signals
from django.db.models import Model as DjangoModel

from llmgw.database import prepared

M = TypeVar("M", bound=DjangoModel)
T = TypeVar("T")
Converter = Callable[[Any, Any, Any], Any]
Select = tuple[str, tuple[str, ...], tuple[tuple[int, Converter, Any], ...]]

# Each shape's statement, by what it was composed from: the models and
# their fields do not change while the process runs.
_composed: dict[tuple[Any, ...], Any] = {}


def _once(key: tuple[Any, ...], compose: Callable[..., T]) -> T:
    found: T | None = _composed.get(key)
    if found is None:
        found = _composed[key] = compose(*key[1:])
    return found


def _select(
    model: type[DjangoModel], where: tuple[str, ...], lock: bool, defer: tuple[str, ...]
) -> Select:
    """The statement, the attnames it reads, and each column's converters
    (index, converter, its expression) as a queryset applies them."""
    quote = connection.ops.quote_name
    opts = model._meta
    fields = [f for f in opts.concrete_fields if f.primary_key or f.name not in defer]
    converters = []
    for i, field in enumerate(fields):
        col = field.get_col(opts.db_table)
        for convert in connection.ops.get_db_converters(col) + col.get_db_converters(connection):
            converters.append((i, convert, col))
    match = " AND ".join(f"{quote(opts.get_field(name).column)} = %s" for name in where)
    # Each column named with its table, as the ORM names them: the check
    # that the warm fleet's log covers what it reads finds them by that.
    table = quote(opts.db_table)
    sql = (
        f"SELECT {', '.join(f'{table}.{quote(f.column)}' for f in fields)} FROM {table}"
        f"{' WHERE ' + match if match else ''}{' FOR UPDATE' if lock else ''}"
    )
    return sql, tuple(f.attname for f in fields), tuple(converters)


def read(
    model: type[M], *, lock: bool = False, defer: tuple[str, ...] = (), **where: Any
) -> list[M]:
    """model.objects.filter(**where).order_by(), locked (select_for_update)
    when `lock`, its `defer` columns deferred: keyed by plain values of
    the model's fields (a foreign key by its name, given the key); every
    row when `where` is empty."""
    sql, attnames, converters = _once(("select", model, tuple(where), lock, defer), _select)
    with connection.cursor() as cursor:
        cursor.execute(sql, list(where.values()))
        found = cursor.fetchall()
    objs = []
    for row in found:
        values = list(row)
        for i, convert, col in converters:
            values[i] = convert(values[i], col, connection)
        objs.append(model.from_db(connection.alias, attnames, values))
    return objs


def _inserted(model: type[DjangoModel]) -> tuple[Field[Any, Any], ...]:
    return tuple(f for f in model._meta.concrete_fields if not f.primary_key)


def _insert(model: type[DjangoModel], rows: int) -> str:
    quote = connection.ops.quote_name
    fields = _once(("inserted", model), _inserted)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([row] * rows)} RETURNING {quote(model._meta.pk.column)}"
    )


def _upsert(
    model: type[DjangoModel], rows: int, unique: tuple[str, ...], names: tuple[str, ...]
) -> str:
    quote = connection.ops.quote_name
    opts = model._meta
    columns = [quote(opts.get_field(name).column) for name in unique]
    sets = ", ".join(
        f"{column} = EXCLUDED.{column}"
        for column in (quote(opts.get_field(n).column) for n in names)
    )
    insert = _insert(model, rows).rpartition(" RETURNING ")
    return (
        f"{insert[0]} ON CONFLICT ({', '.join(columns)}) DO UPDATE SET {sets} RETURNING {insert[2]}"
    )


def insert(
    objs: Sequence[DjangoModel], unique: tuple[str, ...] = (), update: tuple[str, ...] = ()
) -> None:
    """Model.objects.bulk_create(objs), for objects of one model with no
    key of their own: inserted in one statement, each given its key. With
    `unique` and `update`: bulk_create(objs, update_conflicts=True,
    unique_fields=unique, update_fields=update), the row already there
    under those fields updated instead."""
    if not objs:
        return
    model = type(objs[0])
    fields = _once(("inserted", model), _inserted)
    params: list[Any] = []
    for obj in objs:
        # pre_save fills auto_now_add fields on the object as bulk_create does.
        params += [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    if unique:
        sql = _once(("upsert", model, len(objs), unique, update), _upsert)
    else:
        sql = _once(("insert", model, len(objs)), _insert)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        keys = cursor.fetchall()
    for obj, (key,) in zip(objs, keys, strict=True):
        obj.pk = key
        obj._state.adding = False
        obj._state.db = connection.alias


def _update(model: type[DjangoModel], names: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    opts = model._meta
    sets = ", ".join(f"{quote(opts.get_field(name).column)} = %s" for name in names)
    return f"UPDATE {quote(opts.db_table)} SET {sets} WHERE {quote(opts.pk.column)} = %s"


def update(model: type[DjangoModel], pk: Any, values: dict[str, Any]) -> None:
    """model.objects.filter(pk=pk).update(**values), for plain values (no
    expressions): each converted by its field as update() converts it."""
    if not values:
        return
    opts = model._meta
    params: list[Any] = []
    for name, value in values.items():
        field = opts.get_field(name)
        if hasattr(value, "prepare_database_save"):  # a model instance, for a foreign key
            value = value.prepare_database_save(field)
        params.append(field.get_db_prep_save(value, connection))
    params.append(opts.pk.get_db_prep_save(pk, connection))
    with connection.cursor() as cursor:
        cursor.execute(_once(("update", model, tuple(values)), _update), params)


def _seen_again(model: type[DjangoModel], key: str, column: str) -> str:
    quote = connection.ops.quote_name
    opts = model._meta
    table, pk = quote(opts.db_table), quote(opts.pk.column)
    key, column = quote(opts.get_field(key).column), quote(opts.get_field(column).column)
    return (
        f"UPDATE {table} SET {column} = %s WHERE {pk} IN (SELECT {pk} FROM {table}"
        f" WHERE {key} = ANY(%s) AND {column} < %s FOR NO KEY UPDATE SKIP LOCKED)"
    )


def seen_again(
    model: type[DjangoModel], key: str, keys: list[Any], now: Any, column: str = "last_seen"
) -> None:
    """Set `column` to `now` on the rows whose `key` is among `keys`, passing
    over a row another transaction is writing: thousands of nodes joining
    one fabric each say they saw it, and the row's lock, held until each
    one's transaction commits, took them in turn. The writer's time is as
    recent, so the column is still when some node last said so. The lock
    is the one an UPDATE takes, so the foreign-key checks of rows that
    refer to this one (each joining node's ports) neither wait on it nor
    make it pass over."""
    if not keys:
        return
    field = model._meta.get_field(column)
    when = field.get_db_prep_save(now, connection)
    with connection.cursor() as cursor:
        cursor.execute(_once(("seen again", model, key, column), _seen_again), [when, keys, when])


def _plainly_deleted(model: type[DjangoModel]) -> bool:
    # No row of another model refers to its rows, nor a many-to-many
    # table: nothing to cascade to.
    return not model._meta.related_objects and not model._meta.many_to_many


def _delete(model: type[DjangoModel], where: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    opts = model._meta
    match = " AND ".join(f"{quote(opts.get_field(name).column)} = %s" for name in where)
    return f"DELETE FROM {quote(opts.db_table)} WHERE {match}"


def delete(model: type[DjangoModel], **where: Any) -> None:
    """model.objects.filter(**where).delete(), keyed by plain values as
    read() is. For a model nothing refers to and no signal listens for,
    the ORM's own delete is one DELETE too, built anew each time; for any
    other, it is the ORM's."""
    listened = any(s.has_listeners(model) for s in (signals.pre_delete, signals.post_delete))
    if listened or not _once(("plainly deleted", model), _plainly_deleted):
        model._default_manager.filter(**where).delete()
        return
    with connection.cursor() as cursor:
        cursor.execute(_once(("delete", model, tuple(where)), _delete), list(where.values()))


# Stands for the keys in a composed statement's parameters.
_KEYS = object()


class _Among(Lookup):  # type: ignore[misc]  # Django ships no types
    """column = ANY(keys): one parameter however many keys, so that one
    composed statement serves every set of them (IN has one a key)."""

    lookup_name = "among"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s::bigint[])", [*lhs_params, _KEYS]


Values = tuple[str, tuple[Any, ...], int | None, tuple[tuple[int, list[Converter], Any], ...]]


def _values(make: Callable[[], QuerySet[Any]], column: str | None) -> Values:
    query = make() if column is None else make().filter(_Among(F(column), None))
    compiler = query.query.get_compiler(using=query.db)
    sql, params = compiler.as_sql()
    fields = [s[0] for s in compiler.select[: compiler.col_count]]
    converters = tuple(
        (i, list(convs), expr) for i, (convs, expr) in compiler.get_converters(fields).items()
    )
    at = next((i for i, p in enumerate(params) if p is _KEYS), None)
    return sql, tuple(params), at, converters


def values(
    name: Hashable, make: Callable[[], QuerySet[Any]], column: str, keys: Collection[int] | None
) -> list[tuple[Any, ...]]:
    """The rows of `make()` (a values_list queryset, which `name` names),
    for every row or only those whose `column` (an integer key) is one of
    `keys`: what list(make()) and list(make().filter(column__in=keys))
    return, converted as a queryset converts them. Composed once each way
    and kept prepared on the connection: the warm fleet reads a node again
    after every change, and Django composing its statements was two thirds
    of what a node's read cost."""
    sql, params, at, converters = _once(
        ("values", name, None if keys is None else column),
        lambda _, column: _values(make, column),
    )
    bound = list(params)
    if at is not None:
        bound[at] = list(keys or ())
    with prepared.cursor() as cursor:
        cursor.execute(sql, bound)
        found: list[tuple[Any, ...]] = cursor.fetchall()
    if not converters:
        return found
    out = []
    for row in found:
        converted = list(row)
        for i, convs, expr in converters:
            for convert in convs:
                converted[i] = convert(converted[i], expr, connection)
        out.append(tuple(converted))
    return out
