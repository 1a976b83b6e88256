"""Stamps: what a process built something from (a prompt's anchors block, a team's tool
definitions), read inside a statement a turn makes anyway (its claim), so the process
knows at once whether what it kept from an earlier turn still holds.

A stamp is the rows themselves, the fields the kept thing depends on, as one JSON text:
a write from anywhere (a service, the admin, another worker, an UPDATE) shows in it,
with no counter for a writer to forget to move. Its text differs between databases
(PostgreSQL's spacing, how times read): a reader compares it, or takes from it only
numbers and text (a team's roster)."""

from __future__ import annotations

from django.db.models import F, QuerySet, Subquery, TextField


class RowsJson(Subquery):
    """The rows of `queryset` (correlated to the outer query with OuterRef), each a
    JSON array of `fields`, as one JSON text in the queryset's order; NULL or "[]"
    when there is none."""

    def __init__(self, queryset: QuerySet, *fields: str):
        self.columns = [f"stamp_{i}" for i in range(len(fields))]
        rows = queryset.values(**{c: F(f) for c, f in zip(self.columns, fields, strict=True)})
        super().__init__(rows, output_field=TextField())

    def as_sql(self, compiler, connection, template=None, **extra_context):
        columns = ", ".join(connection.ops.quote_name(c) for c in self.columns)
        if connection.vendor == "postgresql":
            rows = f"JSON_AGG(JSON_BUILD_ARRAY({columns}))::text"
        else:
            rows = f"JSON_GROUP_ARRAY(JSON_ARRAY({columns}))"
        template = f"(SELECT {rows} FROM (%(subquery)s) stamp_rows)"
        return super().as_sql(compiler, connection, template=template, **extra_context)
