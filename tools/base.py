"""The tool pattern (seed 001): a name, an LLM-facing description, a pydantic
parameter model and run(params, ctx) -> str | ToolResult.

The model never supplies team or agent ids: they come from the ToolContext the
engine injects. A tool returns friendly text for expected failures (or raises a
teams.errors.LoomError, which becomes that text); anything else is a bug, logged
and reported to the model as "Error: ...". A tool that ends the agent's turn says
so in its result, as a value (TurnEnd), never through the context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from teams.models import TurnOutcome

if TYPE_CHECKING:
    from teams.models import Agent, Message, Team, Turn

MAX_RESULT_CHARS = 8000  # the default budget of one tool result
DIGEST_CHARS = 300  # one line of an agent's record of its own actions


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
    # Asks the agent's model a one-off question, (system, prompt, max tokens) ->
    # text, with the usage counted on the turn; the engine supplies it.
    ask_model: Callable[[str, str, int], str] | None = None
    # Asks a consultant profile for a structured answer (profile, frame) -> reply; only
    # the network call, so ask_multi may run several in threads. The engine supplies it.
    consult: Callable | None = None
    # Calls a tool of an MCP server, (server, tool name, arguments) -> a result with
    # .text and .is_error; a failure raises a LoomError. The engine supplies it.
    call_mcp: Callable | None = None
    # In a replay (teams.engine.replay): the original's result of this call, (tool name,
    # tool_use_id, writes_files=...) -> result, for tools that must not act again
    # (run_command answers with it instead of running its command, an MCP tool instead
    # of calling its server). None outside a replay. The engine supplies it.
    replayed: Callable[..., ToolResult] | None = None
    # The id of the call being run (the model's tool_use id); "" outside a turn's call.
    tool_use_id: str = ""
    # The text of the model's response that carries this call (what the agent says
    # beside it), "" outside a turn. The engine supplies it.
    said: str = ""


@dataclass(frozen=True)
class TurnEnd:
    """How a tool ends the turn: a Turn.Outcome and its reason (the pass reason, the
    question for the PM, the phase summary)."""

    outcome: TurnOutcome
    reason: str


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False
    ends_turn: TurnEnd | None = None
    # The line the agent's later requests in the phase carry about this call ("" for
    # none); the registry fills it from Tool.digest after the call.
    digest: str = ""


class Tool:
    name: ClassVar[str]
    description: ClassVar[str]
    Params: ClassVar[type[Params]] = NoParams
    # True where a service's expected failure (not found, already answered, max hops)
    # is a plain result the model reads, as the seeds word them, not an error.
    failures_are_results: ClassVar[bool] = False
    # True for tools that may call a model (smart retrieval): they run outside the
    # transaction that records their step, which must not stay open that long.
    calls_model: ClassVar[bool] = False
    # True for tools that run long without a model (a command): they too run outside
    # the transaction that records their step (on SQLite it would hold the write lock).
    runs_long: ClassVar[bool] = False
    # What the team's state table allows (registry.state_refusal checks it before any
    # run, the agent loop's and the API's alike): a tool that writes is refused on a
    # finished team, where only reading is left; `statuses`, when given, are the only
    # team statuses the tool works in.
    writes: ClassVar[bool] = True
    statuses: ClassVar[frozenset[str] | None] = None
    # What having this tool lets an agent do, in a teammate's words ("writes files"):
    # the system prompt names it on each teammate's line where the tool is theirs in
    # the phase, so a plan gives work only to who can do it. "" for tools every agent
    # has or that change nothing a plan hangs on.
    ability: ClassVar[str] = ""
    # The most characters of its result the model reads (one policy, per-tool budgets:
    # a tool whose result holds several answers bounds each itself, within this).
    result_limit: ClassVar[int] = MAX_RESULT_CHARS

    def run(self, params: Any, ctx: ToolContext) -> str | ToolResult:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def digest(cls, params: Any, result: ToolResult) -> str:
        """One line for the agent's record of its own actions, which its later
        requests in the phase carry; "" keeps no record. Tools override it to say what
        matters ("you asked coder q-…"); the default names the call and its result."""
        arguments = "; ".join(
            f"{key} {_short(value, 60)}"
            for key, value in params.model_dump(exclude_defaults=True).items()
        )
        given = f" ({arguments})" if arguments else ""
        return f"You used {cls.name}{given}. Result: {_short(result.text, 160)}"

    # Who has the tool by default: the roles listed, every one when None; the phases
    # listed, or those `phase_rule` accepts, every one when both are None. A team's
    # `tool_access` replaces these (teams.models.Team.tool_access), so the API can list
    # them and say why a call is refused. A rule is (its phases in words, a test of a
    # phase name and the team's phases in order): where a tool helps may depend on what
    # came before (a review after an implementation fixes what it finds).
    roles: ClassVar[frozenset[str] | None] = None
    phases: ClassVar[frozenset[str] | None] = None
    phase_rule: ClassVar[tuple[str, Callable[[str, Sequence[str]], bool]] | None] = None

    @classmethod
    def access(cls, team: Team) -> tuple[frozenset[str] | None, Callable[[str], bool], str]:
        """(roles or None for all, a test of a phase name, the phases in words)."""
        rule = (team.tool_access or {}).get(cls.name) if team is not None else None
        roles = cls.roles
        if isinstance(rule, dict) and "roles" in rule:
            roles = frozenset(rule["roles"]) or None
        if isinstance(rule, dict) and "phases" in rule:
            listed = frozenset(rule["phases"])
            if not listed:
                return roles, lambda phase: True, "every phase"
            return roles, listed.__contains__, ", ".join(sorted(listed))
        if cls.phases is not None:
            return roles, cls.phases.__contains__, ", ".join(sorted(cls.phases))
        if cls.phase_rule is not None:
            words, test = cls.phase_rule
            order = tuple(team.phases) if team is not None else ()
            return roles, lambda phase: test(phase, order), words
        return roles, lambda phase: True, "every phase"

    @classmethod
    def refusal(cls, team: Team) -> str:
        """Why this tool can do nothing for anyone on the team now (no consultant is
        enabled; no sandbox on this host), or "" when it can. A tool whose use depends
        on such a condition overrides it: the registry offers no tool that gives a
        reason, and answers a call of one with it. Called once per team and process
        while what the turn's claim stamps is unchanged (tools.registry.turn_toolset),
        so it reads only what those stamps cover, or what never changes while the
        process runs."""
        return ""

    @classmethod
    def refusal_for(cls, agent: Agent, messages: list[Message]) -> str:
        """Why this tool can do nothing for `agent` in the request whose history is
        `messages` (an answer with no question open to it), or "" when it can. The agent
        loop offers no tool that gives a reason, and answers a call of one with it (no
        violation: nothing in the agent's role or phase forbids it). The API and an MCP
        seat run such a tool all the same (a program may know what the history does not
        show), and the tool's own errors say what is wrong. Read from the history the
        request shows, so that it costs no statement of its own."""
        return ""

    @classmethod
    def unavailable_reason(cls, agent: Agent, team: Team) -> str:
        """Why `agent` may not use this tool now, or "" when it may."""
        roles, phase_allowed, phases = cls.access(team)
        if roles is not None and agent.role not in roles:
            only = " and ".join(sorted(roles))
            return f"{cls.name} is only for the {only} role; {agent.name} is a {agent.role}."
        if not phase_allowed(team.phase):
            return f"{cls.name} is only for {phases}; the team is in {team.phase}."
        return ""

    @classmethod
    def available_to(cls, agent: Agent, team: Team) -> bool:
        return not cls.unavailable_reason(agent, team)

    @classmethod
    def definition(cls) -> dict:
        # Built once per class: the schema never changes at run time.
        cached = cls.__dict__.get("_definition")
        if cached is None:
            cached = cls._build_definition()
            cls._definition = cached
        return cached

    @classmethod
    def definition_for(cls, team: Team | None) -> dict:
        """The definition a team's agents get; tools whose schema names team data
        (the consultants a team may ask) override it."""
        return cls.definition()

    @classmethod
    def _build_definition(cls) -> dict:
        schema = cls.Params.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema.setdefault("properties", {})
        return {"name": cls.name, "description": cls.description, "input_schema": schema}


def _short(value, limit: int) -> str:
    """One line of at most `limit` characters, cut after a whole word when one ends in
    its last fifth (a model reads "Agree o…" as a typo, "Agree…" as a cut)."""
    text = " ".join(str(value).split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 4 // 5:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def truncate(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    note = f"\n\n[Result truncated: showing {limit:,} of {len(text):,} characters.]"
    return text[:limit] + note
