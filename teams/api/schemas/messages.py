"""The conversation: messages, answers to the PM's requests, and the turns."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from teams.api.schemas.common import In
from teams.live.event_payloads import MessageOut, TurnOut
from teams.models import (
    HUMAN_TEXT_LIMIT,
    Anchor,
    MessageKind,
)

ANCHOR_KEY_MAX = Anchor._meta.get_field("key").max_length
MessageKindFilter = Literal[tuple(MessageKind.values)]  # type: ignore[valid-type]


class MessageIn(In):
    content: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)


class MessagePage(BaseModel):
    messages: list[MessageOut]
    next_after: int = Field(description="Pass as `after` to get what follows.")
    has_more: bool


class AnswerIn(In):
    answer: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)
    pin_as: str | None = Field(
        None,
        max_length=ANCHOR_KEY_MAX,
        description="Also pin the answer as the anchor of this key: in every later prompt.",
    )
    note: str | None = Field(
        None,
        max_length=HUMAN_TEXT_LIMIT,
        description="Approval requests: a note the agent reads with the call's outcome.",
    )
    arguments: dict | None = Field(
        None,
        description=(
            "Approval requests answered 'Approve' or 'Always approve': the call runs with "
            "these arguments instead (checked against the tool's schema: 422 if they do "
            "not fit, and nothing runs)."
        ),
    )


class TurnPage(BaseModel):
    turns: list[TurnOut]
    next_after: int
    has_more: bool
