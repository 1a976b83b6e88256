"""The tool pattern (seed 001): a name, an LLM-facing description, a pydantic
parameter model and run(params, ctx) -> str.

The model never supplies team or agent ids: they come from the ToolContext the
loop injects. A tool returns friendly text for expected failures (or raises a
teams.errors.LoomError, which becomes that text); anything else is a bug, logged
and reported to the model as "Error: ...".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from teams.models import Agent, Message, Team, Turn

MAX_RESULT_CHARS = 8000


class Params(BaseModel):
    """Base for tool parameter models: unknown keys are refused, not ignored."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class NoParams(Params):
    pass


@dataclass
class ToolContext:
    team: Team
    agent: Agent
    turn: Turn | None = None
    # The loop's own message snapshot: tools read it instead of calling back into
    # a running agent (the offload deadlock of seed 001).
    messages: list[Message] = field(default_factory=list)
    # Set by tools that end the turn (pass_turn, ask_pm, signal_phase_complete).
    ended_by: str = ""
    end_reason: str = ""


class Tool:
    name: ClassVar[str]
    description: ClassVar[str]
    Params: ClassVar[type[Params]] = NoParams
    # True for tools whose call ends the agent's turn once their results are in.
    ends_turn: ClassVar[bool] = False
    # True where a service's expected failure (not found, already answered, max hops)
    # is a plain result the model reads, as the seeds word them, not an error.
    failures_are_results: ClassVar[bool] = False

    def run(self, params: Any, ctx: ToolContext) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def available_to(cls, agent: Agent, team: Team) -> bool:
        """Role and phase rules; everyone by default."""
        return True

    @classmethod
    def definition(cls) -> dict:
        # Built once per class: the schema never changes at run time.
        cached = cls.__dict__.get("_definition")
        if cached is None:
            cached = cls._build_definition()
            cls._definition = cached
        return cached

    @classmethod
    def _build_definition(cls) -> dict:
        schema = cls.Params.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema.setdefault("properties", {})
        return {"name": cls.name, "description": cls.description, "input_schema": schema}


@dataclass
class ToolResult:
    text: str
    is_error: bool = False


def truncate(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    note = f"\n\n[Result truncated: showing {limit:,} of {len(text):,} characters.]"
    return text[:limit] + note
