"""Model ids and their prices: data the domain owns.

Calling a model is the engine's job (teams.engine.providers); knowing what a call
costs and which model an agent uses by default is not."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

OFFLINE_MODEL = "loom-offline"
CLAUDE_PREFIX = "claude-"
CLAUDE_DEFAULT_MODEL = "claude-sonnet-4-6"
# The model ids some provider serves: the offline model's, and every id that starts
# with a family prefix (teams.engine.providers has a provider for each).
MODEL_FAMILIES = (OFFLINE_MODEL, CLAUDE_PREFIX)


def family_of(model: str) -> str | None:
    """The MODEL_FAMILIES entry whose provider serves this model id, or None."""
    if model == OFFLINE_MODEL:
        return OFFLINE_MODEL
    prefixes = (p for p in MODEL_FAMILIES if p.endswith("-"))
    return next((p for p in prefixes if model.startswith(p) and model != p), None)


# USD per million tokens: (input, output). Cache writes cost 1.25x input and cache
# reads 0.1x input (five-minute ephemeral cache).
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


def price_for(model: str) -> tuple[Decimal, Decimal]:
    for prefix in sorted(PRICES, key=len, reverse=True):
        if model.startswith(prefix):
            inp, out = PRICES[prefix]
            return Decimal(inp), Decimal(out)
    return Decimal(3), Decimal(15)  # unknown ids are priced as Sonnet, the default family


def cost_of(model: str, usage: Usage) -> Decimal:
    inp, out = price_for(model)
    million = Decimal(1_000_000)
    total = (
        usage.input_tokens * inp
        + usage.output_tokens * out
        + usage.cache_creation_tokens * inp * Decimal("1.25")
        + usage.cache_read_tokens * inp * Decimal("0.1")
    ) / million
    return total.quantize(Decimal("0.000001"))
