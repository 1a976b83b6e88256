"""The API's request (In) and response (Out) schemas, each field explicit.

Out schemas of rows the live events also carry (messages, PM requests, queries,
turns) come from teams.schemas, so a program reads the same shapes over HTTP and
over the socket. Limits here mirror the models' rules, so the OpenAPI document
says what is accepted; the models' own validation runs behind them all the same."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from teams import lifecycle
from teams.models import (
    AGENT_NAME_PATTERN,
    HUMAN_TEXT_LIMIT,
    MAX_PHASES,
    PHASE_NAME_MAX,
    PLAN_LIMIT,
    WEBHOOK_URL_MAX,
    Agent,
    AgentRole,
    Anchor,
    AnchorRevision,
    ApiToken,
    ConsultantProfile,
    Consultation,
    Keeper,
    KeeperEntry,
    MessageKind,
    ProviderKind,
    Query,
    Team,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from teams.schemas import MessageOut, QueryOut, TurnOut

MAX_ID = 2**53  # row ids and cursors: any larger is no row (and SQLite's limit is 2**63)
PAGE_DEFAULT = 100
PAGE_MAX = 500


def page_of(rows, limit: int) -> tuple[list, bool]:
    """The first `limit` rows of a query, and whether more follow (one row read ahead)."""
    rows = list(rows[: limit + 1])
    return rows[:limit], len(rows) > limit


class In(BaseModel):
    """Unknown fields are refused, not ignored: a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid")


# --- errors --------------------------------------------------------------------


class ErrorOut(BaseModel):
    detail: str


class FieldErrorOut(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    detail: list[FieldErrorOut]


def responses(ok: dict, *errors: int) -> dict:
    """An operation's documented responses: its success, the errors every operation
    may give (401 no or bad credentials, 403 refused, 422 invalid input, 429 rate
    limit) and its own (400 a request body that is not JSON, 404, 409, ...)."""
    documented = dict(ok)
    for code in (401, 403, 422, 429, *errors):
        documented[code] = ValidationErrorOut if code == 422 else ErrorOut
    return documented


# --- teams and agents ----------------------------------------------------------

PHASES_HELP = f"Phase names in order, each at most {PHASE_NAME_MAX} characters."


class AgentIn(In):
    name: str = Field(pattern=AGENT_NAME_PATTERN, description="Letters, digits, - and _.")
    role: AgentRole
    model: str = Field("", max_length=100, description="Empty: the default model.")
    role_prompt: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    position: int | None = Field(None, ge=0, le=10_000, description="Order in the rotation.")


class AgentPatch(In):
    """Only the fields given change."""

    name: str = Field(None, pattern=AGENT_NAME_PATTERN)
    role: AgentRole = None
    model: str = Field(None, max_length=100)
    role_prompt: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    position: int = Field(None, ge=0, le=10_000)
    context_budget_tokens: int = Field(None, ge=1_000, le=10_000_000)


class AgentOut(BaseModel):
    name: str
    role: str
    model: str
    effective_model: str
    role_prompt: str
    position: int
    context_budget_tokens: int
    turns: int
    drift_score: int
    trajectory: str
    tactic: str
    action: str
    created_at: datetime

    @classmethod
    def of(cls, agent: Agent) -> AgentOut:
        return cls(
            name=agent.name,
            role=agent.role,
            model=agent.model,
            effective_model=agent.effective_model,
            role_prompt=agent.role_prompt,
            position=agent.position,
            context_budget_tokens=agent.context_budget_tokens,
            turns=agent.turns,
            drift_score=agent.drift_score,
            trajectory=agent.trajectory,
            tactic=agent.tactic,
            action=agent.action,
            created_at=agent.created_at,
        )


SLUG_PATTERN = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
PhaseName = Annotated[str, Field(min_length=1, max_length=PHASE_NAME_MAX)]
PLAN_HELP = "Markdown; its '## Plan' section is what agents see when they think back."


class TeamIn(In):
    slug: str = Field(
        max_length=60, pattern=SLUG_PATTERN, description="Lowercase letters, digits and dashes."
    )
    name: str = Field("", max_length=120)
    goal: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    plan: str = Field("", max_length=PLAN_LIMIT, description=PLAN_HELP)
    phases: list[PhaseName] | None = Field(
        None, min_length=1, max_length=MAX_PHASES, description=PHASES_HELP
    )
    workspace: str = Field("", max_length=500)
    max_turns: int = Field(200, ge=1, le=1_000_000, description="Turn budget.")
    max_cost_usd: Decimal = Field(Decimal("5"), ge=0, max_digits=10, decimal_places=4)
    agents: list[AgentIn] = Field([], max_length=50)


class TeamPatch(In):
    """Only the fields given change; status, phase, turns and spend are the engine's."""

    slug: str = Field(None, max_length=60, pattern=SLUG_PATTERN)
    name: str = Field(None, max_length=120)
    goal: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    plan: str = Field(None, max_length=PLAN_LIMIT, description=PLAN_HELP)
    phases: list[PhaseName] = Field(
        None, min_length=1, max_length=MAX_PHASES, description=PHASES_HELP
    )
    workspace: str = Field(None, max_length=500)
    max_turns: int = Field(None, ge=1, le=1_000_000)
    max_cost_usd: Decimal = Field(None, ge=0, max_digits=10, decimal_places=4)


class TeamCloneIn(In):
    """Run a team again: a fresh idle copy (agents, anchors, plan, workspace files)."""

    slug: str | None = Field(
        None,
        max_length=60,
        pattern=SLUG_PATTERN,
        description="The copy's slug; not given: the source's slug with -2, -3...",
    )
    name: str | None = Field(None, max_length=120, description="Not given: the source's name.")


class TeamOut(BaseModel):
    slug: str
    name: str
    goal: str
    plan: str
    phases: list[str]
    phase: str
    phase_index: int
    status: str
    actions: list[str] = Field(description="What a PM may do now: start, pause, resume.")
    workspace: str
    max_turns: int
    turn_count: int
    max_cost_usd: str
    spent_usd: str
    agents: list[AgentOut]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, team: Team) -> TeamOut:
        return cls(
            slug=team.slug,
            name=team.name,
            goal=team.goal,
            plan=team.plan,
            phases=team.phases,
            phase=team.phase,
            phase_index=team.phase_index,
            status=team.status,
            actions=lifecycle.pm_actions(team.status),
            workspace=team.workspace,
            max_turns=team.max_turns,
            turn_count=team.turn_count,
            max_cost_usd=f"{team.max_cost_usd:.4f}",
            spent_usd=f"{team.spent_usd:.6f}",
            agents=[AgentOut.of(a) for a in team.agents.all()],
            created_at=team.created_at,
            updated_at=team.updated_at,
        )


# --- the conversation ----------------------------------------------------------


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
        max_length=80,
        description="Also pin the answer as the anchor of this key: in every later prompt.",
    )


class TurnPage(BaseModel):
    turns: list[TurnOut]
    next_after: int
    has_more: bool


class ContextMessageOut(BaseModel):
    id: int
    kind: str
    speaker: str
    to_you: bool = Field(description="In this agent's inbox (a peer message, query, answer).")
    query: str | None = Field(description="The query ID of a query or answer.")
    phase: str
    content: str
    created_at: datetime


class ContextOut(BaseModel):
    """What the agent would see on its turn, for a program driving it."""

    agent: str
    role: str
    team: str
    goal: str
    status: str
    phase: str
    anchors: dict[str, str]
    open_queries: list[QueryOut] = Field(description="Open questions sent to this agent.")
    messages: list[ContextMessageOut]
    next_after: int
    has_more: bool


# --- knowledge -----------------------------------------------------------------


class QueryDetailOut(QueryOut):
    enrichments: list[str]
    max_hops: int
    created_at: datetime
    expires_at: datetime
    answered_at: datetime | None

    @classmethod
    def of(cls, query: Query) -> QueryDetailOut:
        return cls(
            **QueryOut.of(query).model_dump(),
            enrichments=query.enrichments,
            max_hops=query.max_hops,
            created_at=query.created_at,
            expires_at=query.expires_at,
            answered_at=query.answered_at,
        )


class KeeperOut(BaseModel):
    id: int
    topic: str
    index_entry: str
    agent: str | None
    entries: int
    created_at: datetime

    @classmethod
    def of(cls, keeper: Keeper, entries: int) -> KeeperOut:
        return cls(
            id=keeper.id,
            topic=keeper.topic,
            index_entry=keeper.index_entry,
            agent=keeper.agent.name if keeper.agent_id else None,
            entries=entries,
            created_at=keeper.created_at,
        )


class KeeperEntryOut(BaseModel):
    position: int
    role: str
    content: str

    @classmethod
    def of(cls, entry: KeeperEntry) -> KeeperEntryOut:
        return cls(position=entry.position, role=entry.role, content=entry.content)


class KeeperDetailOut(BaseModel):
    keeper: KeeperOut
    entries: list[KeeperEntryOut]
    next_after: int = Field(description="Pass as `after` (a position) to get what follows.")
    has_more: bool


class RetrievalOut(BaseModel):
    result: str


class AnchorIn(In):
    value: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)


class AnchorOut(BaseModel):
    key: str
    value: str
    updated_by: str
    updated_at: datetime

    @classmethod
    def of(cls, anchor: Anchor) -> AnchorOut:
        return cls(
            key=anchor.key,
            value=anchor.value,
            updated_by=anchor.updated_by,
            updated_at=anchor.updated_at,
        )


class AnchorRevisionOut(BaseModel):
    value: str
    deleted: bool
    changed_by: str
    created_at: datetime

    @classmethod
    def of(cls, revision: AnchorRevision) -> AnchorRevisionOut:
        return cls(
            value=revision.value,
            deleted=revision.deleted,
            changed_by=revision.changed_by,
            created_at=revision.created_at,
        )


class DriftTurnOut(BaseModel):
    number: int
    drift_score: int
    finished_at: datetime | None


class DriftOut(BaseModel):
    agent: str
    score: int = Field(description="0-100, higher is better: 70+ healthy, under 40 lost.")
    meaning: str = Field(description="What the score says, in words.")
    trajectory: str
    tactic: str
    action: str
    chain_breaks: list[str]
    recommendation: str
    context_updates: int
    files_touched: list[str]
    violations: int = Field(description="Tool calls its role or phase did not allow.")
    report: str = Field(description="The drift report, as the agent reads it.")
    turns: list[DriftTurnOut] = Field(description="The score after each of its turns.")


# --- tools ---------------------------------------------------------------------


class ToolOut(BaseModel):
    name: str
    description: str
    input_schema: dict = Field(description="The Anthropic tool definition's input schema.")
    roles: list[str] | None = Field(description="The roles that have it; null: every role.")
    phases: list[str] | None = Field(description="The phases it is offered in; null: all.")


class TurnEndOut(BaseModel):
    kind: str = Field(description="How it ends the agent's turn: pass, pm_request, ...")
    reason: str


class ToolCallOut(BaseModel):
    result: str
    is_error: bool
    outcome: TurnEndOut | None = Field(description="Set when the tool ends the agent's turn.")


# --- tokens --------------------------------------------------------------------


class TokenIn(In):
    label: str = Field("", max_length=80)
    agent: str | None = Field(None, pattern=AGENT_NAME_PATTERN, description="Bind to an agent.")


class TokenOut(BaseModel):
    id: int
    label: str
    prefix: str
    agent: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, token: ApiToken) -> TokenOut:
        return cls(
            id=token.id,
            label=token.name,
            prefix=token.prefix,
            agent=token.agent.name if token.agent_id else None,
            created_at=token.created_at,
            last_used_at=token.last_used_at,
            revoked_at=token.revoked_at,
        )


class TokenCreatedOut(TokenOut):
    key: str = Field(description="The token itself: shown this once, never again.")


MessageKindFilter = Literal[tuple(MessageKind.values)]  # type: ignore[valid-type]


# --- consultants ------------------------------------------------------------------


class ConsultantIn(In):
    name: str = Field(
        pattern=AGENT_NAME_PATTERN, description="How agents name it when they ask it."
    )
    provider: ProviderKind = ProviderKind.OFFLINE
    model: str = Field(min_length=1, max_length=100)
    base_url: str = Field("", max_length=300, description="Empty: the provider's default.")
    key_env: str = Field(
        "",
        pattern=r"^([A-Z_][A-Z0-9_]{0,99})?$",
        description="The NAME of the environment variable holding the key (never the key).",
    )
    strengths: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    extra_prompt: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    enabled: bool = True


class ConsultantPatch(In):
    """Only the fields given change."""

    provider: ProviderKind = None
    model: str = Field(None, min_length=1, max_length=100)
    base_url: str = Field(None, max_length=300)
    key_env: str = Field(None, pattern=r"^([A-Z_][A-Z0-9_]{0,99})?$")
    strengths: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    extra_prompt: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    enabled: bool = None


class ConsultantOut(BaseModel):
    name: str
    provider: str
    model: str
    base_url: str
    key_env: str
    key_status: str = Field(description='"ready", or why it cannot be asked now.')
    strengths: str
    extra_prompt: str
    enabled: bool

    @classmethod
    def of(cls, profile: ConsultantProfile, problem: str) -> ConsultantOut:
        return cls(
            name=profile.name,
            provider=profile.provider,
            model=profile.model,
            base_url=profile.base_url,
            key_env=profile.key_env,
            key_status=problem or "ready",
            strengths=profile.strengths,
            extra_prompt=profile.extra_prompt,
            enabled=profile.enabled,
        )


class ConsultationOut(BaseModel):
    id: int
    batch: str = Field(description="Shared by the consultations of one ask of several.")
    agent: str | None
    consultant: str | None
    model: str
    status: str
    prompt: str
    task_type: str
    relevant_files: list[str]
    output: dict | None = Field(description="The structured PeerOutput.")
    dropped_files: list[dict] = Field(description="File references dropped, with why.")
    input_tokens: int
    output_tokens: int
    cost_usd: str
    duration_seconds: float | None
    error: str
    created_at: datetime

    @classmethod
    def of(cls, c: Consultation) -> ConsultationOut:
        return cls(
            id=c.id,
            batch=str(c.batch),
            agent=c.agent.name if c.agent_id else None,
            consultant=c.profile.name if c.profile_id else None,
            model=c.model,
            status=c.status,
            prompt=c.prompt,
            task_type=c.task_type,
            relevant_files=c.relevant_files,
            output=c.output,
            dropped_files=c.flagged_files,
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            cost_usd=str(c.cost_usd),
            duration_seconds=c.duration_seconds,
            error=c.error,
            created_at=c.created_at,
        )


# --- the workspace -------------------------------------------------------------


class WorkspaceEntryOut(BaseModel):
    name: str
    path: str = Field(description="Relative to the workspace.")
    kind: Literal["file", "folder", "link", "other"] = Field(
        description="link: a symbolic link (never followed in a listing); other: a FIFO, "
        "socket or device, never read."
    )
    size: int | None = Field(description="Bytes, for files.")
    written_by: str | None = Field(description="The agent that wrote the file last.")
    turn: int | None = Field(description="The team's turn number of that write.")
    writes: int = Field(description="How many times agents wrote it.")
    updated_at: datetime | None = Field(description="When it was last written by an agent.")


class WorkspaceListOut(BaseModel):
    path: str = Field(description="The folder listed, relative to the workspace ('' the top).")
    entries: list[WorkspaceEntryOut] = Field(description="By name, at most 500.")
    total: int = Field(description="How many entries the folder has.")
    truncated: bool


class WorkspaceFileOut(BaseModel):
    path: str
    size: int
    binary: bool = Field(description="A NUL byte or not UTF-8: the text is not sent.")
    text: str | None = Field(description="The text (its first 100 KB); null when binary.")
    truncated: bool
    written_by: str | None
    turn: int | None
    writes: int
    updated_at: datetime | None


# --- webhooks --------------------------------------------------------------------

WebhookEventName = Literal[tuple(WebhookEvent.values)]  # type: ignore[valid-type]


class WebhookIn(In):
    url: str = Field(
        min_length=1,
        max_length=WEBHOOK_URL_MAX,
        description="Where the events are POSTed: an http:// or https:// URL.",
    )
    events: list[WebhookEventName] = Field(
        min_length=1, max_length=len(WebhookEvent.values), description="Each at most once."
    )
    enabled: bool = True


class WebhookOut(BaseModel):
    id: int
    url: str
    events: list[str]
    enabled: bool
    secret_prefix: str = Field(description="The secret's first characters, to tell it.")
    created_at: datetime

    @classmethod
    def of(cls, webhook: Webhook) -> WebhookOut:
        return cls(
            id=webhook.id,
            url=webhook.url,
            events=list(webhook.events),
            enabled=webhook.enabled,
            secret_prefix=webhook.secret_prefix,
            created_at=webhook.created_at,
        )


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(
        description="Signs every delivery (X-Loom-Signature): shown this once, never again."
    )


class WebhookDeliveryOut(BaseModel):
    id: int = Field(description="Sent as X-Loom-Delivery: the same on every retry.")
    event: str
    status: str = Field(description="pending, delivering, delivered or failed.")
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str
    delivered_at: datetime | None
    created_at: datetime
    payload: dict = Field(description="The JSON body POSTed.")

    @classmethod
    def of(cls, delivery: WebhookDelivery) -> WebhookDeliveryOut:
        return cls(
            id=delivery.id,
            event=delivery.event,
            status=delivery.status,
            attempts=delivery.attempts,
            next_attempt_at=delivery.next_attempt_at,
            last_status_code=delivery.last_status_code,
            last_error=delivery.last_error,
            delivered_at=delivery.delivered_at,
            created_at=delivery.created_at,
            payload=delivery.payload,
        )


class WebhookDeliveryPage(BaseModel):
    deliveries: list[WebhookDeliveryOut]
    next_after: int = Field(description="Pass as `after` to get what follows.")
    has_more: bool


# --- spend -------------------------------------------------------------------------


class SpendUsageOut(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    cost_usd: Decimal


class SpendAgentOut(SpendUsageOut):
    agent: str
    turns: int
    max_cost_usd: Decimal | None = Field(description="The agent's own cost budget, if any.")


class SpendPhaseOut(SpendUsageOut):
    phase: str
    turns: int


class SpendToolOut(BaseModel):
    tool: Literal["consultations", "smart retrieval"]
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


class SpendCutOut(BaseModel):
    mechanism: Literal["passes", "offload", "caching"]
    count: int = Field(
        description="Passes made, messages offloaded, or tokens read from the prompt cache."
    )
    tokens: int = Field(description="Input tokens kept out of (or read cheaper by) model calls.")
    usd: Decimal = Field(description="What those tokens would have cost at full input price.")


class SpendOut(BaseModel):
    """Where a team's money goes. A turn's figures include the calls its tools made
    (consultations, smart retrieval), so the per-tool rows are a part of the per-agent
    and per-phase ones; the cuts are estimates (see the README's Money and budgets)."""

    team: str
    spent_usd: Decimal
    max_cost_usd: Decimal
    totals: SpendUsageOut
    agents: list[SpendAgentOut]
    phases: list[SpendPhaseOut]
    tools: list[SpendToolOut]
    cuts: list[SpendCutOut]
    unknown_prices: list[str] = Field(
        description="Models used whose price Loom does not know: counted as free."
    )
