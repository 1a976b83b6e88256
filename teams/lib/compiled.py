"""Annotations compiled once: the correlated subqueries a hot statement carries (a
claimed turn's read, the rotation, the stuck checks' reads), as RawSQL made from the
SQL the ORM compiles for them the first time, kept per process and database.

The one place Loom goes beyond the public ORM (issue 34). Django builds and compiles
every query anew, and these subqueries were about a third of a steady turn's CPU
(bench/turn_overhead.py: docs/benchmarks.md has the figures). It takes only
expressions with no value of a call's own: correlated to the outer row with OuterRef,
their constants fixed when `build` makes them (no stand-in numbers). It reads the
ORM's compiler (Query.get_compiler, SQLCompiler.compile), which Django does not
promise to keep: tests/teams/lib/test_compiled.py runs each kept set both ways and
compares what they read, so an upgrade that changes them fails there, loudly."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model
from django.db.models.expressions import RawSQL

_kept: dict[tuple, dict[str, RawSQL]] = {}
_kept_lock = threading.Lock()


def compiled(model: type[Model], build: Callable[[], dict]) -> dict[str, RawSQL]:
    """The annotations `build()` makes on a query of `model` (correlated to its
    table), as RawSQL compiled once per process and database vendor."""
    connection = connections[DEFAULT_DB_ALIAS]
    key = (model, build, connection.vendor)
    with _kept_lock:
        found = _kept.get(key)
    if found is None:
        query = model._default_manager.annotate(**build()).query
        compiler = query.get_compiler(connection=connection)
        found = {}
        for name, expression in query.annotations.items():
            sql, params = compiler.compile(expression)
            found[name] = RawSQL(sql, params, output_field=expression.output_field)
        with _kept_lock:
            _kept[key] = found
    return dict(found)
