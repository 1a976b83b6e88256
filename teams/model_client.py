"""The model boundary: Claude through the anthropic SDK, or the offline model.

Both speak one interface, respond(...) -> ModelReply, so the loop does not know
which it has. The anthropic client is built lazily from settings; its own retries
cover 429, 5xx and 529 (overloaded)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from decimal import Decimal

import anthropic
from django.conf import settings

log = logging.getLogger("loom.model")

OFFLINE_MODEL = "loom-offline"
DEFAULT_MAX_TOKENS = 2048

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


class ModelError(Exception):
    """The model call failed after the SDK's retries; the message says why."""


@dataclass
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


@dataclass
class ModelReply:
    content: list[dict]
    stop_reason: str
    model: str
    usage: Usage = field(default_factory=Usage)

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def tool_uses(self) -> list[dict]:
        return [b for b in self.content if b.get("type") == "tool_use"]


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


class AnthropicModel:
    offline = False

    def __init__(self, client: anthropic.Anthropic):
        self.client = client

    def respond(
        self,
        *,
        model: str,
        system: list[dict],
        messages: list[dict],
        tools: list[dict],
        max_tokens: int = DEFAULT_MAX_TOKENS,
        on_text=None,
    ) -> ModelReply:
        kwargs = {"model": model, "max_tokens": max_tokens, "system": system, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        try:
            with self.client.messages.stream(**kwargs) as stream:
                if on_text is not None:
                    for text in stream.text_stream:
                        on_text(text)
                final = stream.get_final_message()
        except anthropic.APIStatusError as exc:
            raise ModelError(_describe_status_error(exc)) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelError(f"Could not reach the Messages API: {exc}") from exc
        except anthropic.APIError as exc:  # an error event in the middle of a stream
            raise ModelError(f"The Messages API failed: {exc}") from exc
        usage = final.usage
        return ModelReply(
            content=[_block_dict(block) for block in final.content],
            stop_reason=final.stop_reason or "end_turn",
            model=final.model or model,
            usage=Usage(
                input_tokens=usage.input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
                cache_creation_tokens=getattr(usage, "cache_creation_input_tokens", 0) or 0,
                cache_read_tokens=getattr(usage, "cache_read_input_tokens", 0) or 0,
            ),
        )


def _describe_status_error(exc: anthropic.APIStatusError) -> str:
    detail = ""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error") if isinstance(body.get("error"), dict) else body
        detail = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
    return f"Messages API returned HTTP {exc.status_code}" + (f" ({detail})" if detail else "")


def _block_dict(block) -> dict:
    if block.type == "text":
        data = {"type": "text", "text": block.text}
    elif block.type == "tool_use":
        data = {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    else:
        data = block.model_dump(mode="json", exclude_none=True)
    return without_nul(data)


def without_nul(value):
    """Model output minus NUL characters, which PostgreSQL text and jsonb refuse:
    a stray one must not fail the turn that carries it."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {k: without_nul(v) for k, v in value.items()}
    return value


_client_lock = threading.Lock()
_clients: dict[tuple, anthropic.Anthropic] = {}


def _anthropic_client() -> anthropic.Anthropic:
    key = (
        settings.ANTHROPIC_API_KEY,
        settings.ANTHROPIC_BASE_URL,
        getattr(settings, "LOOM_MODEL_MAX_RETRIES", 4),
    )
    with _client_lock:
        if key not in _clients:
            api_key, base_url, retries = key
            _clients[key] = anthropic.Anthropic(
                api_key=api_key, base_url=base_url, max_retries=retries, timeout=120
            )
        return _clients[key]


def get_model():
    """Claude when an API key is configured, the offline model otherwise."""
    if settings.ANTHROPIC_API_KEY:
        return AnthropicModel(_anthropic_client())
    from teams.offline_model import OfflineModel

    return OfflineModel()
