"""Cursor paging: every list that can grow is read after an id, a page at a time, and
a page holds at most PAGE_CHARS characters of text besides (one longer item still
comes, alone: every text is capped where it is accepted, docs/api.md "Limits")."""

from collections.abc import Callable

from ninja import Query

MAX_ID = 2**53  # row ids and cursors: any larger is no row (and SQLite's limit is 2**63)
MAX_NUMBER = 2**31 - 1  # turn and revision numbers: PostgreSQL's integer column
PAGE_DEFAULT = 100
PAGE_MAX = 500
PAGE_CHARS = 1_000_000  # of the texts of one page (or one list answer)

Limit = Query(PAGE_DEFAULT, ge=1, le=PAGE_MAX)


def page_of(rows, limit: int) -> tuple[list, bool]:
    """The first `limit` rows of a query, and whether more follow (one row read ahead)."""
    rows = list(rows[: limit + 1])
    return rows[:limit], len(rows) > limit


def within_chars(
    page: list, has_more: bool, *, size: Callable[[object], int], chars: int = PAGE_CHARS
) -> tuple[list, bool]:
    """The page cut where its items' text (`size` of each) passes `chars`, the first
    item always kept; and whether more follow (those cut, or the page's own more)."""
    used = 0
    for index, item in enumerate(page):
        used += size(item)
        if index and used > chars:
            return page[:index], True
    return page, has_more
