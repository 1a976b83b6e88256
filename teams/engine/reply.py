"""What every model provider speaks: respond(...) -> ModelReply."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from teams.lib.catalog import Usage

DEFAULT_MAX_TOKENS = 2048
# A tool_use block's input when the model's arguments were not a JSON object: the raw
# text under this key, answered with invalid_arguments_error() instead of being run.
INVALID_ARGUMENTS = "__loom_invalid_json__"


def invalid_arguments_error(use: dict) -> str:
    """The "Error: ..." a tool call gets when its arguments were not a JSON object, or
    "" for a call whose arguments were."""
    arguments = use.get("input")
    if not isinstance(arguments, dict) or INVALID_ARGUMENTS not in arguments:
        return ""
    raw = str(arguments[INVALID_ARGUMENTS])
    try:
        json.loads(raw)
        why = "they are JSON but not an object"
    except ValueError as exc:
        why = f"they are not valid JSON ({exc})"
    shown = raw if len(raw) <= 200 else raw[:200] + "…"
    return (
        f"Error: the arguments of your {use.get('name')} call were not used: {why}. You "
        f"sent: {shown}. Call it again with a JSON object of its parameters."
    )


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


class Provider(Protocol):
    def respond(
        self,
        *,
        model: str,
        system: list[dict],
        messages: list[dict],
        tools: list[dict],
        max_tokens: int = DEFAULT_MAX_TOKENS,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply: ...
