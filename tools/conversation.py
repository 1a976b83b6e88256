"""Conversation tools (seed 003): pass_turn, ask_pm, signal_phase_complete."""

import re
from typing import Annotated

from pydantic import Field, StringConstraints

from teams.conversation import pm_requests
from teams.errors import InvalidInput
from teams.models import HUMAN_TEXT_LIMIT, Agent, TeamStatus, Turn
from teams.run import team_actions
from tools.base import Params, Tool, ToolContext, ToolResult, TurnEnd
from tools.registry import register


class PassTurnParams(Params):
    reason: str = Field(
        min_length=1,
        max_length=HUMAN_TEXT_LIMIT,
        description="Brief reason for passing (e.g., 'agree with proposal', 'waiting for layer 2')",
    )


@register
class PassTurn(Tool):
    name = "pass_turn"
    writes = False
    description = (
        "Call this when you have nothing new to contribute to the current discussion. "
        "Do not call this if you have concerns, questions, disagreements, or new "
        "information to share. Only pass when you genuinely agree with everything said "
        "and have nothing to add."
    )
    Params = PassTurnParams

    @classmethod
    def digest(cls, params, result) -> str:
        return ""  # a pass leaves no trace in any agent's context, its own included

    def run(self, params: PassTurnParams, ctx: ToolContext) -> ToolResult:
        return ToolResult("Turn passed.", ends_turn=TurnEnd(Turn.Outcome.PASS, params.reason))


COACH_ONLY = frozenset({Agent.Role.COACH.value})


class AskPmParams(Params):
    question: str = Field(
        min_length=1,
        max_length=HUMAN_TEXT_LIMIT,
        description="What you need the PM to decide or clarify",
    )


@register
class AskPm(Tool):
    name = "ask_pm"
    description = (
        "Pause the conversation and request input from the project manager. Use when a "
        "decision requires PM authority or when the team is stuck on a question only the "
        "PM can answer."
    )
    Params = AskPmParams

    roles = COACH_ONLY
    ability = "asks the PM"

    @classmethod
    def digest(cls, params, result) -> str:
        if result.is_error:
            return super().digest(params, result)
        return f'You asked the PM: "{params.question}" The team waited for the answer.'

    def run(self, params: AskPmParams, ctx: ToolContext) -> ToolResult:
        pm_requests.pm_request_open(
            team=ctx.team, agent=ctx.agent, question=params.question, turn=ctx.turn
        )
        return ToolResult(
            "Your question is with the PM. The conversation pauses after this turn; the "
            "PM's answer will appear in the conversation as a PM message.",
            ends_turn=TurnEnd(Turn.Outcome.PM_REQUEST, params.question),
        )


class PhaseCompleteParams(Params):
    summary: str = Field(
        min_length=1,
        max_length=HUMAN_TEXT_LIMIT,
        description="What the team agreed in this phase; later phases see only this summary",
    )
    replaces: list[Annotated[str, StringConstraints(max_length=60)]] = Field(
        default_factory=list,
        max_length=20,
        description="Earlier phases whose summaries this one replaces because it restates "
        "or corrects them whole: later requests show each of them as one line pointing "
        "here. Omit it when this summary only adds to them.",
    )


# How a summary marks the earlier ones it replaces: the words open the summary as
# stored (teams.run.team_actions.phase_complete keeps the coach's text as given), so the
# record, the plan and every later request say it; replaced_phases reads them back.
REPLACES_OPENING = "(Replaces the summary of "
REPLACES = re.compile(
    r"\[Phase (?P<phase>[^\]]+) complete\] " + re.escape(REPLACES_OPENING) + r"(?P<of>[^)]*)\.\)"
)


def replaces_marker(phases: list[str]) -> str:
    return f"{REPLACES_OPENING}{', '.join(phases)}.) "


def replaced_phases(record: str) -> tuple[str, list[str]]:
    """(the phase a summary record closed, the earlier phases whose summaries it
    replaces), from its first line; ("", []) for a summary that replaces none."""
    found = REPLACES.match(record)
    if found is None:
        return "", []
    return found["phase"], [p.strip() for p in found["of"].split(", ") if p.strip()]


@register
class SignalPhaseComplete(Tool):
    name = "signal_phase_complete"
    statuses = frozenset({TeamStatus.RUNNING.value})
    description = (
        "Signal that the current phase's work is complete and the team should move to the "
        "next phase. Give a summary of what was decided: it is what later phases see of "
        "this one."
    )
    Params = PhaseCompleteParams

    roles = COACH_ONLY
    ability = "closes the phase"

    @classmethod
    def digest(cls, params, result) -> str:
        return "" if not result.is_error else super().digest(params, result)

    def run(self, params: PhaseCompleteParams, ctx: ToolContext) -> ToolResult:
        finished = ctx.team.phase
        replaced = _replaced(ctx.team, params.replaces)
        summary = (replaces_marker(replaced) if replaced else "") + params.summary
        # What the coach says beside the call closes the phase it was said in: it comes
        # before the summary, not after "Phase advanced" as the turn's end would post it.
        team = team_actions.phase_complete(
            team=ctx.team, agent=ctx.agent, summary=summary, words=ctx.said, turn=ctx.turn
        )
        if team.status == team.Status.DONE:
            text = f"Phase {finished} complete. That was the last phase: the team is done."
        else:
            text = f"Phase {finished} complete. The team moves on to {team.phase}."
        return ToolResult(text, ends_turn=TurnEnd(Turn.Outcome.PHASE_COMPLETE, params.summary))


def _replaced(team, named: list[str]) -> list[str]:
    """The earlier phases named, once each in the team's order; an InvalidInput naming
    the ones that may be replaced when a name is not an earlier phase (nothing closes)."""
    earlier = list(team.phases[: team.phase_index])
    wrong = [name for name in named if name not in earlier]
    if wrong:
        allowed = ", ".join(earlier) if earlier else "none: this is the first phase"
        raise InvalidInput(
            f"replaces names {', '.join(repr(w) for w in wrong)}, not an earlier phase "
            f"of this team (those are: {allowed}). The phase is not closed."
        )
    return [phase for phase in earlier if phase in named]
