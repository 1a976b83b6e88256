"""The PM steering a run: the next speaker, a nudge, a seat taken."""

from __future__ import annotations

from pydantic import Field

from teams.api.schemas.common import In
from teams.models import HUMAN_TEXT_LIMIT, Agent

AGENT_NAME_MAX = Agent._meta.get_field("name").max_length


class NextSpeakerIn(In):
    agent: str = Field(
        min_length=1, max_length=AGENT_NAME_MAX, description="The agent who speaks next, once."
    )


class SteerTextIn(In):
    text: str = Field(
        min_length=1,
        max_length=HUMAN_TEXT_LIMIT,
        description="What the agent reads (a nudge) or what the PM says as the agent (a seat).",
    )
