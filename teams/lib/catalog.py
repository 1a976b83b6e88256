"""Model ids and their prices: data the domain owns.

Calling a model is the engine's job (teams.engine.providers); knowing what a call
costs and which model an agent uses by default is not."""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from teams.lib.endpoints import ANTHROPIC_ENDPOINT, OFFLINE_MODEL, is_local

CLAUDE_DEFAULT_MODEL = "claude-sonnet-4-6"


# USD per million tokens: (input, output). Cache writes cost 1.25x input and cache
# reads 0.1x input (five-minute ephemeral cache). The defaults: the price table
# (teams.models.ModelPrice, edited in the admin) starts as these and is what counts.
PRICES = {
    "claude-opus-4-1": (15, 75),
    "claude-opus-4": (15, 75),
    "claude-opus": (5, 25),
    "claude-sonnet": (3, 15),
    "claude-haiku-4": (1, 5),
    "claude-3-5-haiku": (Decimal("0.8"), 4),
    "claude-haiku": (1, 5),
    OFFLINE_MODEL: (0, 0),
}


# The most tokens one reply may hold unless the agent says otherwise (Agent.max_tokens):
# room for a whole file in one write on Claude; the offline model writes short lines.
CLAUDE_MAX_TOKENS = 8192
OFFLINE_MAX_TOKENS = 2048


def default_max_tokens(model: str) -> int:
    """A reply's token limit when the agent sets none, by the model's family."""
    return OFFLINE_MAX_TOKENS if model == OFFLINE_MODEL else CLAUDE_MAX_TOKENS


def default_model() -> str:
    """LOOM_MODEL when set; otherwise Claude with an API key, the offline model without."""
    if settings.LOOM_MODEL:
        return settings.LOOM_MODEL
    return CLAUDE_DEFAULT_MODEL if settings.ANTHROPIC_API_KEY else OFFLINE_MODEL


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0

    def as_fields(self) -> dict:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "cache_read_tokens": self.cache_read_tokens,
        }


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_read: Decimal

    @classmethod
    def of(cls, inp, out) -> Price:
        inp = Decimal(inp)
        return cls(inp, Decimal(out), inp * CACHE_WRITE_FACTOR, inp * CACHE_READ_FACTOR)


CACHE_WRITE_FACTOR = Decimal("1.25")
CACHE_READ_FACTOR = Decimal("0.1")
MILLION = Decimal(1_000_000)
FREE = Price(Decimal(0), Decimal(0), Decimal(0), Decimal(0))

# The price table (teams.models.ModelPrice) as this process last read it: re-read
# after a save here, and at least every PRICES_TTL seconds (another process saved).
PRICES_TTL = 30.0
_table: dict[str, Price] | None = None
_table_read_at = 0.0


# Reads the ModelPrice rows as (model, Price) pairs: TeamsConfig.ready() hands it
# teams.models.price_rows (the models import this module, not the other way round).
_price_rows = None


def prices_load_with(loader) -> None:
    global _price_rows
    _price_rows = loader
    prices_invalidate()


def prices_invalidate() -> None:
    global _table
    _table = None


def price_table() -> dict[str, Price]:
    """Model id or prefix -> Price: the ModelPrice rows, or PRICES when there are none
    (a fresh database, tests that emptied it)."""
    global _table, _table_read_at
    now = time.monotonic()
    if _table is None or now - _table_read_at > PRICES_TTL:
        rows = dict(_price_rows()) if _price_rows is not None else {}
        _table = rows or {prefix: Price.of(*pair) for prefix, pair in PRICES.items()}
        _table_read_at = now
    return _table


def price_for(model: str) -> Price | None:
    """The price of the longest id or prefix in the table that `model` starts with
    (`anthropic/claude-…` is priced as its bare `claude-…` id); free for a model of a
    `local` endpoint the table does not know; None for any other model the table does
    not know. Such a model is never priced as some other model, and never called
    (price_problem): a call Loom could not count would slip past every budget. Rows
    recorded before it was refused are counted as free and flagged in the admin."""
    table = price_table()
    bare = model.removeprefix(f"{ANTHROPIC_ENDPOINT}/")
    for candidate in (model, bare) if bare != model else (model,):
        for prefix in sorted(table, key=len, reverse=True):
            if candidate.startswith(prefix):
                return table[prefix]
    return FREE if is_local(model) else None


def priced_as_local(model: str) -> bool:
    """Is this model free because its endpoint is `local` (no price row): the pages
    say "local" instead of a price."""
    table = price_table()
    return is_local(model) and not any(model.startswith(prefix) for prefix in table)


def price_problem(model: str) -> str:
    """Why a call to `model` is not made for want of a price, or "" when it may be
    (the offline model is always free). The model providers and the pre-call budget
    check (teams.run.budgets.call_refusal) refuse such a call with this message."""
    if model == OFFLINE_MODEL or price_for(model) is not None:
        return ""
    return (
        f"No price is known for the model {model!r}, so Loom does not call it (its cost "
        "could not be counted against the budgets). A superuser adds its price in the "
        f"admin, Model prices: a row for {model!r} or a prefix of it, in USD per million "
        "tokens; or choose a model that has a price"
    )


def cost_of(model: str, usage: Usage) -> Decimal:
    price = price_for(model) or FREE
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_tokens * price.cache_write
        + usage.cache_read_tokens * price.cache_read
    ) / MILLION
    return total.quantize(Decimal("0.000001"))
