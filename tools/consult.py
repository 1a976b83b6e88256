"""Consultation tools (seed 002): ask_peer asks one consultant profile, ask_multi
asks several at once; both answer in the structured PeerOutput, rendered compactly
for the asking agent and stored whole."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pydantic import Field

from teams import consultations as c
from teams.catalog import Usage
from teams.errors import LoomError
from teams.models import ConsultantProfile, Consultation
from tools.base import Params, Tool, ToolContext
from tools.registry import register

MAX_PARALLEL = 8

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
    prompt: str = Field(min_length=1, description="The question or request for the peer")
    task_type: TaskType | None = Field(
        default=None, description="plan, debug, explain, question, fix, explore or general"
    )
    relevant_files: list[str] | None = Field(
        default=None,
        max_length=c.MAX_FILES,
        description="Workspace files the peer should focus on (their content is sent)",
    )
    context: str | None = Field(
        default=None, description="Additional context: error messages, prior analysis"
    )
    focus_areas: list[FocusArea] | None = Field(default=None, description="What to look at")
    custom_prompt: str | None = Field(
        default=None, description="Additional instructions for the peer"
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
    peer: str = Field(min_length=1, description="The consultant to ask (see ask_multi's list)")


def _peer_list() -> str:
    profiles = c.profiles_enabled()
    if not profiles:
        return "No consultants are enabled."
    return (
        "Consultants: " + "; ".join(f"{p.name} ({p.strengths or p.model})" for p in profiles) + "."
    )


def _ask(ctx: ToolContext, profiles: list[ConsultantProfile], request: c.PeerRequest):
    """Open a record per profile, ask them all at once, and close each record."""
    batch = uuid.uuid4()
    frames, records = [], []
    for profile in profiles:
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
            )
        )

    def call(pair):
        profile, frame = pair
        try:
            return ctx.consult(profile, frame)
        except LoomError as exc:
            return exc

    # The network calls run side by side; the database is touched only here.
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(profiles))) as pool:
        replies = list(pool.map(call, zip(profiles, frames, strict=True)))
    return [_close(ctx, record, reply) for record, reply in zip(records, replies, strict=True)]


def _close(ctx: ToolContext, record: Consultation, reply) -> Consultation:
    if isinstance(reply, LoomError):
        return c.consultation_close(
            consultation=record, model=record.model, usage=Usage(), seconds=0, error=reply.message
        )
    try:
        if reply.problem:
            raise LoomError(f"The consultant's reply is unusable: {reply.problem}.")
        output, dropped = c.dropped_references(ctx.team, c.parse_peer_output(reply.data))
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


@register
class AskPeer(Tool):
    name = "ask_peer"
    description = (
        "Ask another model for help as a peer engineer: planning, debugging, explaining, "
        "fixing, exploring or a question. It reads the workspace files you name and "
        "answers with key points, suggested actions and the files it refers to."
    )
    Params = AskPeerParams
    calls_model = True

    def run(self, params: AskPeerParams, ctx: ToolContext) -> str:
        profile = ConsultantProfile.objects.filter(name=params.peer, enabled=True).first()
        if profile is None:
            return f"Error: no enabled consultant named {params.peer!r}. {_peer_list()}"
        (record,) = _ask(ctx, [profile], params.request())
        return c.render(record)


class AskMultiParams(PeerFields):
    peers: list[str] | None = Field(
        default=None, description="Consultants to ask. Omit to ask every enabled one."
    )


@register
class AskMulti(Tool):
    name = "ask_multi"
    description = (
        "Ask several other models the same question at once and get their answers side "
        "by side, to compare perspectives (each has its strengths). Omit peers to ask "
        "every enabled consultant."
    )
    Params = AskMultiParams
    calls_model = True

    def run(self, params: AskMultiParams, ctx: ToolContext) -> str:
        profiles = c.profiles_enabled()
        if params.peers:
            wanted = set(params.peers)
            unknown = wanted - {p.name for p in profiles}
            if unknown:
                names = ", ".join(sorted(unknown))
                return f"Error: no enabled consultant named {names}. {_peer_list()}"
            profiles = [p for p in profiles if p.name in wanted]
        if not profiles:
            return "Error: no consultants are enabled; a PM can add them in the admin."
        records = _ask(ctx, profiles, params.request())
        done = sum(r.status == Consultation.Status.DONE for r in records)
        head = f"{done} of {len(records)} consultants answered."
        return "\n\n".join([head, *(c.render(r) for r in records)])
