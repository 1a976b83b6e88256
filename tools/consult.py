"""Consultation tools: ask_peer asks one consultant profile, ask_multi asks several at
once, read_consultation reads a stored one again in full. The consultants are the
profiles the agent's team has enabled (Team.consultants); their names and strengths
are in the tools' input schema. Answers come in the structured PeerOutput, rendered
compactly for the asking agent and stored whole.

Every consultant call passes the same pre-call check as a turn's model call
(teams.run.budgets.call_refusal): a consultant whose model has no price, or whose call
would cross the team's or the agent's cost budget, is not asked (the team then
pauses with a budget request, as the loop does); an A2A agent's call has no token
price and is not checked. ask_multi's result holds every
consultant's answer, each within its share of the tool's result budget."""

from __future__ import annotations

import contextvars
import copy
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import Field

from teams.errors import LoomError
from teams.files.workspace import MAX_PATH_CHARS
from teams.integrations import consultations as c
from teams.lib.catalog import Usage
from teams.models import HUMAN_TEXT_LIMIT, SHORT_TEXT_LIMIT, ConsultantProfile, Consultation, Team
from teams.run import budgets
from tools.base import Params, Tool, ToolContext, ToolResult, _short
from tools.registry import register

MAX_PARALLEL = 8
MAX_PEERS = 50  # consultants named in one ask_multi
ShortText = Annotated[str, Field(max_length=SHORT_TEXT_LIMIT)]
WorkspacePath = Annotated[str, Field(max_length=MAX_PATH_CHARS)]
STRENGTHS_CHARS = 200  # of one consultant's strengths, in the schema
# The result budgets: one answer of the largest size a consultant may give (2,000
# tokens) with its key points fits ask_peer's; ask_multi shares its own among the
# consultants asked (eight get 4,000 characters each, three over 10,000).
PEER_RESULT_CHARS = 16_000
MULTI_RESULT_CHARS = 32_000
READ_RESULT_CHARS = 32_000

TaskType = Literal["plan", "debug", "explain", "question", "fix", "explore", "general"]
FocusArea = Literal[
    "correctness",
    "security",
    "performance",
    "architecture",
    "maintainability",
    "testing",
    "documentation",
]


class PeerFields(Params):
    prompt: str = Field(
        min_length=1,
        max_length=HUMAN_TEXT_LIMIT,
        description="The question or request for the peer",
    )
    task_type: TaskType | None = Field(
        default=None, description="plan, debug, explain, question, fix, explore or general"
    )
    relevant_files: list[WorkspacePath] | None = Field(
        default=None,
        max_length=c.MAX_FILES,
        description="Workspace files the peer should focus on (their content is sent)",
    )
    context: str | None = Field(
        default=None,
        max_length=HUMAN_TEXT_LIMIT,
        description="Additional context: error messages, prior analysis",
    )
    focus_areas: list[FocusArea] | None = Field(
        default=None, max_length=len(c.FOCUS_AREAS), description="What to look at"
    )
    custom_prompt: str | None = Field(
        default=None,
        max_length=HUMAN_TEXT_LIMIT,
        description="Additional instructions for the peer",
    )

    def request(self) -> c.PeerRequest:
        return c.PeerRequest(
            prompt=self.prompt,
            task_type=self.task_type or "general",
            relevant_files=list(self.relevant_files or []),
            context=self.context or "",
            focus_areas=list(self.focus_areas or []),
            custom_prompt=self.custom_prompt or "",
        )


class AskPeerParams(PeerFields):
    peer: str = Field(
        min_length=1, max_length=SHORT_TEXT_LIMIT, description="The consultant to ask"
    )


def _peer_list(team: Team) -> str:
    profiles = c.profiles_enabled(team)
    if not profiles:
        return "No consultants are enabled for this team; a PM can enable them in the admin."
    return "Consultants: " + "; ".join(_described(p) for p in profiles) + "."


def _described(profile: ConsultantProfile) -> str:
    return f"{profile.name} ({_short(profile.strengths or profile.model, STRENGTHS_CHARS)})"


def _profiles_enabled(team: Team) -> list[ConsultantProfile]:
    """The team's consultants, read once for this team row (a turn's definitions of
    both consultation tools name them: consultations.profiles_read)."""
    return c.profiles_enabled(team, once=True)


def _with_consultants(definition: dict, team: Team | None, field: str, lead: str) -> dict:
    """The definition with the team's consultants in `field`'s description, and their
    names as its enum (the items' enum for a list)."""
    if team is None:
        return definition
    profiles = _profiles_enabled(team)
    definition = copy.deepcopy(definition)
    prop = definition["input_schema"]["properties"][field]
    if not profiles:
        prop["description"] = (
            f"{lead} None are enabled for this team: a PM enables them in the admin."
        )
        return definition
    names = [p.name for p in profiles]
    prop["description"] = f"{lead} This team's consultants: " + "; ".join(
        _described(p) for p in profiles
    )
    target = prop
    for option in prop.get("anyOf", []):
        if option.get("type") == "array":
            target = option
    if target.get("type") == "array":
        target.setdefault("items", {})["enum"] = names
    else:
        prop["enum"] = names
    return definition


def _ask(ctx: ToolContext, profiles: list[ConsultantProfile], request: c.PeerRequest):
    """Open a record per profile, check each call against the budgets, ask those that
    pass all at once, and close each record."""
    batch = uuid.uuid4()
    frames, records = [], []
    for index, profile in enumerate(profiles):
        frames.append(
            c.peer_frame(profile=profile, team=ctx.team, agent=ctx.agent, request=request)
        )
        records.append(
            c.consultation_open(
                team=ctx.team,
                agent=ctx.agent,
                turn=ctx.turn,
                profile=profile,
                request=request,
                batch=batch,
                lead=index == 0,  # the request's texts are stored once, on the first
            )
        )
    refusals = _refusals(ctx, profiles, frames)

    def call(pair):
        profile, frame, refusal = pair
        if refusal is not None:
            return LoomError(refusal.text.removeprefix("Error: "))
        try:
            return ctx.consult(profile, frame)
        except LoomError as exc:
            return exc

    # The network calls run side by side; the database is touched only here.
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(profiles))) as pool:
        # Each in a copy of this context: the calls' trace spans are the tool's children.
        futures = [
            pool.submit(contextvars.copy_context().run, call, pair)
            for pair in zip(profiles, frames, refusals, strict=True)
        ]
        replies = [future.result() for future in futures]
    return [_close(ctx, record, reply) for record, reply in zip(records, replies, strict=True)]


def _refusals(ctx: ToolContext, profiles, frames) -> list[budgets.Refusal | None]:
    """The pre-call check of each consultant's call, in order: the calls allowed so far
    in this ask count against the budgets of the next (they run at once). The team
    pauses with one budget request when any was refused for its budget."""
    refusals, reserved = [], Decimal(0)
    for profile, frame in zip(profiles, frames, strict=True):
        if c.is_a2a(profile):  # no model, no token price: nothing to estimate or refuse
            refusals.append(None)
            continue
        estimate, refusal = budgets.call_refusal(
            team=ctx.team,
            agent=ctx.agent,
            model=profile.model,
            max_tokens=c.OUTPUT_TOKENS,
            about=f"The consultation of {profile.name} for {ctx.agent.name}",
            reserved=reserved,
            **c.call_shape(frame),
        )
        refusals.append(refusal)
        if refusal is None:
            reserved += estimate
    stop = next((r for r in refusals if r is not None and r.over_budget), None)
    if stop is not None:
        stop.stop(ctx.team)
    return refusals


def _close(ctx: ToolContext, record: Consultation, reply) -> Consultation:
    if isinstance(reply, LoomError):
        return c.consultation_close(
            consultation=record, model=record.model, usage=Usage(), seconds=0, error=reply.message
        )
    try:
        if reply.problem:
            raise LoomError(f"The consultant's reply is unusable: {reply.problem}.")
        output = c.parse_peer_output(reply.data, responder=record.profile.name)
        output, dropped = c.dropped_references(ctx.team, output)
    except LoomError as exc:
        return c.consultation_close(
            consultation=record,
            model=reply.model,
            usage=reply.usage,
            seconds=reply.seconds,
            error=exc.message,
        )
    return c.consultation_close(
        consultation=record,
        model=reply.model,
        usage=reply.usage,
        seconds=reply.seconds,
        output=output,
        dropped=dropped,
    )


def _read_hint(consultation_id) -> str:
    return f"read it in full with {ReadConsultation.name}({consultation_id})"


HEADING = re.compile(r"^## (\S+) \(.*\), consultation (\d+)$", re.MULTILINE)


def _asked(params, result: ToolResult) -> str:
    """'You asked architect and critic (consultations 12, 13): "<prompt>"', from the
    headings of the result; "" when nobody was asked."""
    found = HEADING.findall(result.text)
    if not found:
        return ""
    names = [name for name, _ in found]
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    ids = ", ".join(i for _, i in found)
    noun = "consultation" if len(found) == 1 else "consultations"
    return f'You asked {who} ({noun} {ids}): "{_short(params.prompt, 160)}"'


class ConsultantTool(Tool):
    """A tool that asks or reads the team's consultants: of use only while the team
    has one enabled (read once per team row: the turn's claim stamps them)."""

    @classmethod
    def refusal(cls, team: Team) -> str:
        if team is None or c.profiles_enabled(team, once=True):
            return ""
        return (
            f"{cls.name} needs a consultant, and team {team.slug} has none enabled; a PM "
            "can enable one in the admin (Consultant profiles)."
        )


@register
class AskPeer(ConsultantTool):
    name = "ask_peer"
    description = (
        "Ask another model for help as a peer engineer: planning, debugging, explaining, "
        "fixing, exploring or a question. It reads the workspace files you name and "
        "answers with key points, suggested actions and the files it refers to. "
        "Each answer is stored as a consultation: read one again in full with "
        "read_consultation(consultation_id)."
    )
    Params = AskPeerParams
    calls_model = True
    result_limit = PEER_RESULT_CHARS

    @classmethod
    def definition_for(cls, team):
        return _with_consultants(cls.definition(), team, "peer", "The consultant to ask.")

    def run(self, params: AskPeerParams, ctx: ToolContext) -> str:
        profile = ctx.team.consultants.filter(name=params.peer, enabled=True).first()
        if profile is None:
            return f"Error: no enabled consultant named {params.peer!r}. {_peer_list(ctx.team)}"
        (record,) = _ask(ctx, [profile], params.request())
        footer = f"(Consultation {record.pk}: {_read_hint(record.pk)}.)"
        limit = self.result_limit - len(footer) - 2
        return c.render(record, limit, more=_read_hint(record.pk)) + "\n\n" + footer

    @classmethod
    def digest(cls, params, result):
        return _asked(params, result) or super().digest(params, result)


class AskMultiParams(PeerFields):
    peers: list[ShortText] | None = Field(
        default=None,
        max_length=MAX_PEERS,
        description="Consultants to ask. Omit to ask every enabled one.",
    )


@register
class AskMulti(ConsultantTool):
    name = "ask_multi"
    description = (
        "Ask several other models the same question at once and get their answers side "
        "by side, to compare perspectives (each has its strengths). Omit peers to ask "
        "every enabled consultant. Every answer is in the result (a long one is cut "
        "and says so); read one in full with read_consultation(consultation_id)."
    )
    Params = AskMultiParams
    calls_model = True
    result_limit = MULTI_RESULT_CHARS

    @classmethod
    def definition_for(cls, team):
        return _with_consultants(
            cls.definition(),
            team,
            "peers",
            "Consultants to ask. Omit to ask every enabled one.",
        )

    def run(self, params: AskMultiParams, ctx: ToolContext) -> str:
        profiles = c.profiles_enabled(ctx.team)
        if params.peers:
            wanted = set(params.peers)
            unknown = wanted - {p.name for p in profiles}
            if unknown:
                names = ", ".join(sorted(unknown))
                return f"Error: no enabled consultant named {names}. {_peer_list(ctx.team)}"
            profiles = [p for p in profiles if p.name in wanted]
        if not profiles:
            return (
                "Error: no consultants are enabled for this team; a PM can enable them in "
                "the admin."
            )
        records = _ask(ctx, profiles, params.request())
        done = sum(r.status == Consultation.Status.DONE for r in records)
        ids = ", ".join(str(r.pk) for r in records)
        head = (
            f"{done} of {len(records)} consultants answered. Consultations {ids}: read one "
            f"in full with {ReadConsultation.name}(consultation_id)."
        )
        # Every answer gets an equal share of the budget: none is dropped.
        separators = 2 * len(records)
        share = (self.result_limit - len(head) - separators) // len(records)
        answers = [c.render(r, share, more=_read_hint(r.pk)) for r in records]
        return "\n\n".join([head, *answers])

    @classmethod
    def digest(cls, params, result):
        asked = _asked(params, result)
        if not asked:
            return super().digest(params, result)
        answered = result.text.split(" consultants answered", 1)[0]
        return f"{asked} ({answered} answered)"


class ReadConsultationParams(Params):
    consultation_id: int = Field(
        ge=1, description="The consultation's id, as ask_peer and ask_multi give it"
    )


@register
class ReadConsultation(ConsultantTool):
    name = "read_consultation"
    writes = False
    description = (
        "Read a stored consultation of your team again, in full: the question, the "
        "consultant's whole answer with its key points, suggested actions, file "
        "references and alternatives, who answered and when."
    )
    Params = ReadConsultationParams
    result_limit = READ_RESULT_CHARS

    def run(self, params: ReadConsultationParams, ctx: ToolContext) -> str:
        return c.render_whole(c.consultation_of(ctx.team, params.consultation_id))

    @classmethod
    def digest(cls, params, result):
        found = HEADING.search(result.text)
        if not found:
            return super().digest(params, result)
        return f"You read consultation {params.consultation_id} ({found.group(1)}) in full."
