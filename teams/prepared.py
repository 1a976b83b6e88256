"""Reads compiled once: a turn's hottest statements (its claim's read, the rotation) as
the SQL the ORM compiled for them the first time, run with each call's values, and
their rows made into model instances as the ORM makes them (select_related and
annotations included).

The ORM builds and compiles a query anew for every call, and on a steady turn that
was as much CPU as the turn's own work. The query is built once with stand-in numbers
for its values (`prepared_rows(build, turn_id=...)` calls `build(turn_id=<stand-in>)`),
and each stand-in must come out as a parameter of its own: otherwise (or with extra
selects) the query is run through the ORM each time, with the real values. Kept per
thread, as Django keeps a connection per thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators

_STAND_IN = -1_000_000_007  # stand-ins count down from here: numbers no row has


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple  # each a value, or the name of the call's value in its place
    slots: tuple[int, ...]  # the positions of the names
    model: type[Model]
    init_list: list[str]
    fields: tuple[int, int]  # the model's columns: [start, end)
    related: list
    annotations: dict[str, int]
    converters: list


_local = threading.local()


def prepared_rows(build: Callable[..., QuerySet], **values: int) -> list[Model]:
    """`list(build(**values))`, with the query compiled once per thread and database."""
    connection = connections[DEFAULT_DB_ALIAS]
    kept = getattr(_local, "kept", None)
    if kept is None:
        kept = _local.kept = {}
    key = (build, connection.vendor, tuple(values))
    if key not in kept:
        kept[key] = _compile(build, connection, list(values))
    compiled = kept[key]
    if compiled is None:
        return list(build(**values))
    params = list(compiled.params)
    for slot in compiled.slots:
        params[slot] = values[params[slot]]
    with connection.cursor() as cursor:
        cursor.execute(compiled.sql, params)
        rows = cursor.fetchall()
    start, end = compiled.fields
    found = []
    for row in rows:
        if compiled.converters:
            row = list(row)
            for position, (converters, expression) in compiled.converters:
                value = row[position]
                for converter in converters:
                    value = converter(value, expression, connection)
                row[position] = value
        obj = compiled.model.from_db(connection.alias, compiled.init_list, row[start:end])
        for populator in compiled.related:
            populator.populate(row, obj)
        for name, position in compiled.annotations.items():
            setattr(obj, name, row[position])
        found.append(obj)
    return found


def _compile(build: Callable[..., QuerySet], connection, names: list[str]) -> _Compiled | None:
    stand_ins = {name: _STAND_IN - i for i, name in enumerate(names)}
    queryset = build(**stand_ins)
    if queryset._known_related_objects or queryset.query.extra_select:
        return None
    compiler = queryset.query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    params = list(params)
    by_number = {number: name for name, number in stand_ins.items()}
    slots = [i for i, p in enumerate(params) if type(p) is int and p in by_number]
    if sorted(params[i] for i in slots) != sorted(stand_ins.values()):
        return None  # a value folded into the SQL, or used twice: the ORM each time
    for i in slots:
        params[i] = by_number[params[i]]
    select, klass_info = compiler.select, compiler.klass_info
    if compiler.col_count != len(select):
        return None
    first, last = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
    converters = compiler.get_converters([column[0] for column in select])
    return _Compiled(
        sql=sql,
        params=tuple(params),
        slots=tuple(slots),
        model=klass_info["model"],
        init_list=[column[0].target.attname for column in select[first:last]],
        fields=(first, last),
        related=get_related_populators(klass_info, select, connection.alias),
        annotations=dict(compiler.annotation_col_map or {}),
        converters=list(converters.items()),
    )
