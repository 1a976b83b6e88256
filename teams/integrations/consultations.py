"""Second opinions: an agent asks another model (a consultant profile its team has
enabled), framed as a peer engineer, and gets a structured PeerOutput back; every
consultation is stored with its request, output, usage, cost and duration, and can
be read again in full by its id (the read_consultation tool).

The model call itself is the engine's (ToolContext.consult); this module frames the
request, validates the reply, sets what only Loom knows (the responder is the
profile's name, the timestamp the server's clock), applies the lighter pipeline
(file references that do not exist or leave the workspace are dropped and reported)
and keeps the record."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from django.conf import settings
from django.db import transaction
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from teams.errors import Conflict, InvalidInput, LoomError, NotFound, integrity_as, validated
from teams.lib import endpoints, outbound
from teams.lib.catalog import Usage, cost_of
from teams.live import events
from teams.live.event_payloads import ConsultationBatchOut
from teams.models import Agent, ConsultantProfile, Consultation, Team, Turn
from teams.run.usage import team_add_usage, turn_add_usage
from teams.selectors import team_consultation_batch
from teams.services import text_check, without_nul
from teams.stamps import RowsJson

TASK_TYPES = ("plan", "debug", "explain", "question", "fix", "explore", "general")
FOCUS_AREAS = (
    "correctness",
    "security",
    "performance",
    "architecture",
    "maintainability",
    "testing",
    "documentation",
)
FILE_CHARS = 12_000  # of one relevant file, in the request
FILES_CHARS = 40_000  # of all relevant files together
MAX_FILES = 10
OUTPUT_TOKENS = 2_000


# --- PeerOutput: the structured answer ----------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SuggestedAction(_Strict):
    action: str
    priority: Literal["high", "medium", "low"]
    file: str | None = None
    rationale: str


class FileReference(_Strict):
    path: str
    lines: str | None = None
    relevance: str


class Tradeoffs(_Strict):
    pros: list[str]
    cons: list[str]


class Alternative(_Strict):
    topic: str
    current_approach: str
    alternative: str
    tradeoffs: Tradeoffs
    recommendation: str


class PeerOutput(_Strict):
    responder: str
    timestamp: str
    answer: str = Field(description="The main response (markdown)")
    confidence: float = Field(ge=0, le=1)
    key_points: list[str]
    suggested_actions: list[SuggestedAction]
    file_references: list[FileReference]
    alternatives: list[Alternative] | None = None
    execution_notes: str | None = None


# Set by Loom, never taken from the consulted model: who answered (the profile's name)
# and when (the server's clock).
LOOM_FIELDS = ("responder", "timestamp")


def peer_output_schema() -> dict:
    """What the consultant is asked to fill in (Anthropic's forced tool's input_schema):
    PeerOutput without the fields Loom sets."""
    schema = PeerOutput.model_json_schema()
    for name in LOOM_FIELDS:
        schema["properties"].pop(name, None)
    schema["required"] = [name for name in schema["required"] if name not in LOOM_FIELDS]
    return schema


def strict_schema(schema: dict | None = None) -> dict:
    """The schema for OpenAI's strict structured outputs: every property required (the
    optional ones stay nullable) and no extra keys, at every level."""
    schema = dict(schema or peer_output_schema())

    def tighten(node):
        if isinstance(node, dict):
            node = {k: tighten(v) for k, v in node.items() if k not in ("default", "title")}
            if node.get("type") == "object" and "properties" in node:
                node["required"] = list(node["properties"])
                node["additionalProperties"] = False
            return node
        if isinstance(node, list):
            return [tighten(v) for v in node]
        return node

    return tighten(schema)


def parse_peer_output(data, *, responder: str, timestamp: str | None = None) -> PeerOutput:
    """A validated PeerOutput, or InvalidInput saying what was wrong with the reply.
    `responder` and `timestamp` (default: now) are Loom's: whatever the reply says
    for them is dropped."""
    if not isinstance(data, dict):
        raise InvalidInput("The consultant's reply was not a JSON object.")
    data = {k: v for k, v in data.items() if k not in LOOM_FIELDS}
    data.update(responder=responder, timestamp=timestamp or now_iso())
    try:
        return PeerOutput.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise InvalidInput(
            f"The consultant's reply does not fit PeerOutput ({problems})."
        ) from None


# --- the request -------------------------------------------------------------------


@dataclass
class PeerRequest:
    prompt: str
    task_type: str = "general"
    relevant_files: list[str] = field(default_factory=list)
    context: str = ""
    focus_areas: list[str] = field(default_factory=list)
    custom_prompt: str = ""


@dataclass
class PeerFrame:
    """What one consultant is sent."""

    system: str
    prompt: str
    notes: list[str]  # files that could not be included, and why


def file_excerpts(team: Team, paths: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The relevant files' text (bounded, truncated with a note) and notes on those
    that could not be read (outside the workspace, missing, binary)."""
    excerpts, notes, budget = [], [], FILES_CHARS
    if not paths:
        return excerpts, notes
    from teams.files import workspace

    for path in paths[:MAX_FILES]:
        try:
            got = workspace.file_read(team, path, limit=min(FILE_CHARS, budget))
        except LoomError as exc:
            notes.append(f"{path}: not included ({exc.message})")
            continue
        text = got.text
        if got.truncated:
            text += f"\n[... truncated: the first {len(text):,} characters of {got.size:,} bytes]"
        excerpts.append((path, text))
        budget -= len(text)
        if budget <= 0:
            notes.append("The remaining files were left out: the request's file budget is spent.")
            break
    if len(paths) > MAX_FILES:
        notes.append(f"Only the first {MAX_FILES} relevant files are included.")
    return excerpts, notes


def peer_frame(*, profile: ConsultantProfile, team: Team, agent: Agent, request: PeerRequest):
    """The peer frame: 'You are a peer engineer…', the request, the workspace, the
    files to focus on, the consultant's strengths."""
    system = ["You are a peer engineer."]
    if profile.strengths:
        system.append(f"Your strengths: {profile.strengths}.")
    system.append(
        "Answer with the PeerOutput structure: a markdown answer, your confidence from 0 "
        "to 1, key points, suggested actions with a priority, and the files you refer to."
    )
    if profile.extra_prompt:
        system.append(profile.extra_prompt)
    files = ", ".join(request.relevant_files) or "(none named)"
    lines = [
        f"{agent.name} ({agent.role}) of team {team.name} is asking for your help with: "
        f"{request.prompt}",
        f"Task type: {request.task_type}.",
        f"You have the team's workspace, {team.slug}; files are quoted below. Focus on: {files}.",
    ]
    if request.focus_areas:
        lines.append(f"Focus areas: {', '.join(request.focus_areas)}.")
    if request.context:
        lines += ["", "Context:", request.context]
    excerpts, notes = file_excerpts(team, request.relevant_files)
    for path, text in excerpts:
        lines += ["", f"--- {path} ---", text]
    if notes:
        lines += ["", "Notes:", *notes]
    if request.custom_prompt:
        lines += ["", f"Additional instructions: {request.custom_prompt}"]
    return PeerFrame(system=" ".join(system), prompt="\n".join(lines), notes=notes)


def call_shape(frame: PeerFrame) -> dict:
    """The request a consultant is sent, as the pre-call budget check measures it
    (system, messages, tools): the frame and the PeerOutput schema it must fill."""
    return {
        "system": frame.system,
        "messages": [{"role": "user", "content": frame.prompt}],
        "tools": [peer_output_schema()],
    }


# --- the reply: the lighter pipeline ----------------------------------------------


def dropped_references(team: Team, output: PeerOutput) -> tuple[PeerOutput, list[dict]]:
    """The output without file references that do not exist or leave the workspace,
    and those dropped with the reason."""
    kept, dropped = [], []
    if not output.file_references:
        return output, dropped
    from teams.files import workspace

    for ref in output.file_references:
        try:  # the read's own checks (inside, a regular file), reading nothing
            workspace.file_read(team, ref.path, limit=0)
        except NotFound:
            dropped.append({"path": ref.path, "reason": "no such file in the workspace"})
            continue
        except LoomError as exc:
            dropped.append({"path": ref.path, "reason": exc.message})
            continue
        kept.append(ref)
    return output.model_copy(update={"file_references": kept}), dropped


# --- the record ----------------------------------------------------------------------


def consultation_open(
    *,
    team: Team,
    agent: Agent,
    turn: Turn | None,
    profile: ConsultantProfile,
    request: PeerRequest,
    batch: uuid.UUID | None = None,
    lead: bool = True,
) -> Consultation:
    """The record of one consultant's consultation. The request's texts are stored on
    the batch's lead record only (the first of an ask of several): the others keep an
    empty prompt, and `with_batch_requests` reads the lead's."""
    return Consultation.objects.create(
        team=team,
        agent=agent,
        turn=turn,
        profile=profile,
        batch=batch or uuid.uuid4(),
        prompt=without_nul(request.prompt) if lead else "",
        task_type=request.task_type,
        relevant_files=without_nul(request.relevant_files) if lead else [],
        focus_areas=request.focus_areas,
        context=without_nul(request.context) if lead else "",
        custom_prompt=without_nul(request.custom_prompt) if lead else "",
        model=profile.model,
    )


REQUEST_FIELDS = ("prompt", "relevant_files", "context", "custom_prompt")


def with_batch_requests(rows: list[Consultation]) -> list[Consultation]:
    """The consultations, each with its request's texts: those stored once on its
    batch's lead record are copied onto the others (one query for all of them)."""
    batches = {row.batch for row in rows if not row.prompt}
    if not batches:
        return rows
    leads = {}
    for lead in (
        Consultation.objects.filter(batch__in=batches).exclude(prompt="").order_by("-id")
    ).only("batch", *REQUEST_FIELDS):
        leads[lead.batch] = lead  # the oldest wins
    for row in rows:
        lead = leads.get(row.batch) if not row.prompt else None
        if lead is not None:
            for name in REQUEST_FIELDS:
                setattr(row, name, getattr(lead, name))
    return rows


@transaction.atomic
def consultation_close(
    *,
    consultation: Consultation,
    model: str,
    usage: Usage,
    seconds: float,
    output: PeerOutput | None = None,
    dropped: list[dict] | None = None,
    error: str = "",
) -> Consultation:
    """Store the outcome; its usage and cost count on the turn (or the team)."""
    cost = cost_of(model, usage)
    consultation.status = Consultation.Status.DONE if output else Consultation.Status.FAILED
    consultation.output = without_nul(output.model_dump(mode="json")) if output else None
    consultation.flagged_files = without_nul(dropped or [])
    consultation.model = model
    consultation.input_tokens = usage.input_tokens + usage.cache_read_tokens
    consultation.output_tokens = usage.output_tokens
    consultation.cost_usd = cost
    consultation.duration_seconds = round(seconds, 3)
    consultation.error = without_nul(error)
    consultation.save()
    if consultation.turn_id:
        turn_add_usage(turn=consultation.turn, model=model, usage=usage, is_turn_model=False)
    else:
        team_add_usage(team=consultation.team, model=model, usage=usage)
    batch = team_consultation_batch(team=consultation.team, batch=consultation.batch)
    if batch is not None:
        events.publish(
            events.ConsultationClosed(batch=ConsultationBatchOut.of(batch)),
            team_id=consultation.team_id,
        )
    return consultation


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# --- what the asking agent reads ----------------------------------------------------


def render(
    consultation: Consultation, limit: int | None = None, *, full: bool = False, more: str = ""
) -> str:
    """A compact, readable rendering of one consultation for the asking agent, headed
    with the consultant's name and the consultation's id. Within `limit` characters
    when given: a longer one is cut and says so, and `more` (how to read it whole).
    `full` adds what the compact form leaves out (each file reference's relevance, the
    alternatives' current approach and trade-offs)."""
    name = consultation.profile.name if consultation.profile_id else "consultant"
    head = f"## {name} ({consultation.model}), consultation {consultation.pk}"
    if consultation.status != Consultation.Status.DONE:
        return _within(f"{head}\nError: {consultation.error}", limit, more)
    out = consultation.output
    lines = [head]
    if not is_a2a(consultation.profile):  # an A2A agent gives no confidence
        lines.append(f"Confidence: {out['confidence']:.2f}")
    lines += ["", out["answer"].strip()]
    if out["key_points"]:
        lines += ["", "Key points:", *[f"- {p}" for p in out["key_points"]]]
    if out["suggested_actions"]:
        lines += ["", "Suggested actions:"]
        for a in out["suggested_actions"]:
            where = f" ({a['file']})" if a.get("file") else ""
            lines.append(f"- [{a['priority']}] {a['action']}{where}: {a['rationale']}")
    if out["file_references"]:
        refs = [
            f"{r['path']}{':' + r['lines'] if r.get('lines') else ''}"
            for r in out["file_references"]
        ]
        lines += ["", f"Files: {', '.join(refs)}"]
        if full:
            lines += [f"- {r['path']}: {r['relevance']}" for r in out["file_references"]]
    for alt in out.get("alternatives") or []:
        lines += [
            "",
            f"Alternative for {alt['topic']}: {alt['alternative']} ({alt['recommendation']})",
        ]
        if full:
            lines.append(f"Current approach: {alt['current_approach']}")
            tradeoffs = alt.get("tradeoffs") or {}
            lines += [f"+ {pro}" for pro in tradeoffs.get("pros", [])]
            lines += [f"- {con}" for con in tradeoffs.get("cons", [])]
    if out.get("execution_notes"):
        lines += ["", f"Notes: {out['execution_notes']}"]
    if consultation.flagged_files:
        lines += ["", "Dropped file references:"]
        lines += [f"- {d['path']}: {d['reason']}" for d in consultation.flagged_files]
    return _within("\n".join(lines), limit, more)


def _within(text: str, limit: int | None, more: str) -> str:
    """`text`, or its start and a marker saying it was cut (and `more`), in `limit`
    characters."""
    if limit is None or len(text) <= limit:
        return text
    more = f"; {more}" if more else ""
    marker = f"\n[Answer truncated: the first {{shown:,}} of {len(text):,} characters{more}.]"
    shown = max(0, limit - len(marker.format(shown=limit)))
    return text[:shown] + marker.format(shown=shown)


def render_whole(consultation: Consultation) -> str:
    """A stored consultation in full, to read again by its id: what was asked, by whom,
    the whole answer with its alternatives, who answered when, and what it cost."""
    asker = consultation.agent.name if consultation.agent_id else "a program"
    lines = [
        render(consultation, full=True),
        "",
        f"Asked by {asker} at {consultation.created_at:%Y-%m-%d %H:%M:%S} UTC "
        f"({consultation.task_type or 'general'}): {consultation.prompt}",
    ]
    if consultation.focus_areas:
        lines.append(f"Focus areas: {', '.join(consultation.focus_areas)}.")
    if consultation.relevant_files:
        lines.append(f"Relevant files: {', '.join(consultation.relevant_files)}.")
    if consultation.context:
        lines.append(f"Context: {consultation.context}")
    if consultation.custom_prompt:
        lines.append(f"Additional instructions: {consultation.custom_prompt}")
    if consultation.output:
        out = consultation.output
        lines.append(f"Answered by {out['responder']} at {out['timestamp']}.")
    if is_a2a(consultation.profile):
        lines.append("An A2A agent's answer: no token price, recorded as $0.")
        return "\n".join(lines)
    lines.append(
        f"Tokens: {consultation.input_tokens:,} in, {consultation.output_tokens:,} out; "
        f"cost ${consultation.cost_usd:.4f}."
    )
    return "\n".join(lines)


def consultation_of(team: Team, consultation_id: int) -> Consultation:
    """One of the team's consultations; NotFound for any other id."""
    found = (
        Consultation.objects.select_related("profile", "agent")
        .filter(team=team, pk=consultation_id)
        .first()
    )
    if found is None:
        raise NotFound(f"No consultation {consultation_id} in this team.")
    return with_batch_requests([found])[0]


def profiles_enabled(team: Team, *, once: bool = False) -> list[ConsultantProfile]:
    """The consultant profiles the team's agents may ask: those the team has, enabled
    (`once`: read once for this team row, and kept on it for profiles_read)."""
    if not once:
        return list(team.consultants.filter(enabled=True).order_by("name"))
    profiles = getattr(team, "_consultants_enabled", None)
    if profiles is None:
        profiles = team._consultants_enabled = profiles_enabled(team)
    return profiles


def profiles_read(team: Team) -> list[list] | None:
    """The consultants this team row read once (profiles_enabled), as their stamp
    lists them (profiles_enabled_stamp), sorted; None when none were read."""
    profiles = getattr(team, "_consultants_enabled", None)
    if profiles is None:
        return None
    return sorted([getattr(p, f) for f in PROFILE_STAMP_FIELDS] for p in profiles)


PROFILE_STAMP_FIELDS = ("id", "name", "model", "strengths")  # what the tools' schema shows


def profiles_enabled_stamp(*, team_id) -> RowsJson:
    """A stamp (teams.stamps) of profiles_enabled as the consultation tools' definitions
    show them, for a turn's claim (`team_id`: an OuterRef)."""
    return RowsJson(
        ConsultantProfile.objects.filter(teams=team_id, enabled=True).order_by("name"),
        *PROFILE_STAMP_FIELDS,
    )


NO_ENDPOINT = (ConsultantProfile.Provider.OFFLINE, ConsultantProfile.Provider.A2A)


def is_a2a(profile: ConsultantProfile | None) -> bool:
    """Is this consultant an A2A agent (asked at its card's URL, no model priced)?"""
    return profile is not None and profile.provider == ConsultantProfile.Provider.A2A


def endpoint_of(profile: ConsultantProfile) -> endpoints.Endpoint | None:
    """The model endpoint a profile is called through: its model is an `ENDPOINT/MODEL`
    id (teams.lib.endpoints) and it names no base URL of its own; None otherwise (its
    provider, base URL and key variable say how)."""
    if profile.provider in NO_ENDPOINT or profile.base_url:
        return None
    if "/" not in profile.model:
        return None
    return endpoints.route(profile.model).endpoint


def key_problem(profile: ConsultantProfile) -> str:
    """Why this profile cannot be called now (its key variable is unset), or ""."""
    if profile.provider == ConsultantProfile.Provider.OFFLINE:
        return ""
    if profile.provider == ConsultantProfile.Provider.A2A:
        if not profile.a2a_url:
            return "no agent card URL is set"
        if profile.key_env and not os.environ.get(profile.key_env):
            return f"the key variable {profile.key_env} is not set"
        return ""  # an agent that asks for no token needs no key variable
    endpoint = endpoint_of(profile)
    if endpoint is not None:
        return endpoint.problem()
    if profile.key_env and not os.environ.get(profile.key_env):
        return f"the key variable {profile.key_env} is not set"
    if not profile.key_env and profile.provider == ConsultantProfile.Provider.OPENAI:
        return "no key variable is named (set 'key variable', e.g. OPENAI_API_KEY)"
    if not profile.key_env and not settings.ANTHROPIC_API_KEY:
        return "ANTHROPIC_API_KEY is not set (or name another key variable)"
    return ""


def profile_key(profile: ConsultantProfile) -> str:
    """The profile's key from the environment ("" when there is none to use)."""
    if profile.key_env:
        return os.environ.get(profile.key_env, "")
    if profile.provider == ConsultantProfile.Provider.ANTHROPIC:
        return settings.ANTHROPIC_API_KEY or ""
    return ""


# --- profiles --------------------------------------------------------------------------

PROFILE_SETTINGS = (
    "name",
    "provider",
    "model",
    "base_url",
    "a2a_url",
    "key_env",
    "strengths",
    "extra_prompt",
    "enabled",
)


def base_url_check(url: str) -> None:
    """A consultant's base URL leads to no private address (teams.lib.outbound): the
    requests carry the key to whatever it names."""
    try:
        outbound.check_url(url)
    except outbound.Refused as exc:
        raise InvalidInput(f"This base URL is not used: {exc.reason}.", field="base_url") from None


def a2a_check(profile: ConsultantProfile, fields: list[str]) -> None:
    """An A2A consultant has its agent card's URL, one the outbound guard allows (the
    requests carry its bearer token there), and no base URL; no other has a card URL."""
    if not {"provider", "a2a_url", "base_url"} & set(fields):
        return
    if not is_a2a(profile):
        if profile.a2a_url:
            raise InvalidInput(
                "Only an A2A consultant (provider a2a) has an agent card URL.", field="a2a_url"
            )
        return
    if not profile.a2a_url:
        raise InvalidInput(
            "An A2A consultant needs its agent card's URL (a2a_url).", field="a2a_url"
        )
    if profile.base_url:
        raise InvalidInput(
            "An A2A consultant is asked at its agent card's URL: leave base_url empty.",
            field="base_url",
        )
    try:
        outbound.check_url(profile.a2a_url)
    except outbound.Refused as exc:
        raise InvalidInput(
            f"This agent card URL is not used: {exc.reason}.", field="a2a_url"
        ) from None


@transaction.atomic
def consultant_profile_save(*, profile: ConsultantProfile, fields: list[str]) -> ConsultantProfile:
    """Create a profile (no pk yet) or save the fields a person changed."""
    unknown = set(fields) - set(PROFILE_SETTINGS)
    if unknown:
        raise InvalidInput(f"Not a consultant setting: {', '.join(sorted(unknown))}.")
    for name in fields:
        if isinstance(getattr(profile, name), str):
            text_check(getattr(profile, name), field=name)
    if "base_url" in fields and profile.base_url:
        base_url_check(profile.base_url)  # first: its reason says more than "not a URL"
    a2a_check(profile, fields)
    validated(profile, exclude=[f for f in PROFILE_SETTINGS if f not in fields] or None)
    duplicate = Conflict(f"A consultant named {profile.name!r} already exists.", field="name")
    taken = ConsultantProfile.objects.filter(name=profile.name).exclude(pk=profile.pk)
    if "name" in fields and taken.exists():
        raise duplicate
    with integrity_as(duplicate):
        if profile.pk is None:
            profile.save()
        elif fields:
            profile.save(update_fields=fields)
    return profile
