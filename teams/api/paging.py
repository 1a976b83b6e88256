"""Cursor paging: every list that can grow is read after an id, a page at a time."""

from ninja import Query

MAX_ID = 2**53  # row ids and cursors: any larger is no row (and SQLite's limit is 2**63)
PAGE_DEFAULT = 100
PAGE_MAX = 500

Limit = Query(PAGE_DEFAULT, ge=1, le=PAGE_MAX)


def page_of(rows, limit: int) -> tuple[list, bool]:
    """The first `limit` rows of a query, and whether more follow (one row read ahead)."""
    rows = list(rows[: limit + 1])
    return rows[:limit], len(rows) > limit
