"""What every model provider speaks: respond(...) -> ModelReply."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from teams.lib.catalog import Usage

DEFAULT_MAX_TOKENS = 2048


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
