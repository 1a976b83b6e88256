"""Loom's data model: every piece of a team's life is a row."""

import hashlib
import json
import uuid
from decimal import Decimal
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from teams import catalog, outbound
from teams.catalog import default_model

DEFAULT_PHASES = ["refinement", "planning", "pre-code-review", "implementation", "code-review"]
AGENT_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,39}$"
ANCHOR_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$"

team_slug_validator = RegexValidator(
    r"^[a-z0-9]+(?:-[a-z0-9]+)*$", "Team slugs are lowercase letters, digits and dashes."
)
agent_name_validator = RegexValidator(
    AGENT_NAME_PATTERN,
    "Agent names start with a letter and use only letters, digits, '-' and '_' "
    "(at most 40), so they work as @mentions.",
)


# Choices live at module level so the models' constraints can use them (a Meta
# cannot see its own model's nested classes); each model exposes its own as an alias.


class TeamStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    RUNNING = "running", "Running"
    AWAITING_PM = "awaiting_pm", "Awaiting PM"
    PAUSED = "paused", "Paused"
    DONE = "done", "Done"


class AgentRole(models.TextChoices):
    COACH = "coach", "Coach"
    RESEARCHER = "researcher", "Researcher"
    CODER = "coder", "Coder"
    REVIEWER = "reviewer", "Reviewer"
    TESTER = "tester", "Tester"
    EXTERNAL = "external", "External (driven over the API)"


class TurnStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    # Stopped at a tool call that waits for the PM's approval; re-queued by the answer.
    WAITING = "waiting", "Waiting for approval"


class TurnOutcome(models.TextChoices):
    NONE = "", "—"
    MESSAGE = "message", "Message"
    PASS = "pass", "Pass"
    PM_REQUEST = "pm_request", "PM request"
    PHASE_COMPLETE = "phase_complete", "Phase complete"
    ERROR = "error", "Error"


class QueryStatus(models.TextChoices):
    OPEN = "open", "Open"
    ANSWERED = "answered", "Answered"
    EXPIRED = "expired", "Expired"


class MessageKind(models.TextChoices):
    CHAT = "chat", "Chat"
    PM = "pm", "PM"
    SYSTEM = "system", "System"
    PASS_NOTE = "pass_note", "Pass note"
    PHASE_SUMMARY = "phase_summary", "Phase summary"
    PEER = "peer", "Peer message"
    QUERY = "query", "Query"
    ANSWER = "answer", "Answer"
    TOOL_CALL = "tool_call", "Tool call"
    TOOL_RESULT = "tool_result", "Tool result"
    # The PM steering (teams.steering): a private note for one agent's next turn, and
    # a turn the PM wrote in an agent's seat.
    NUDGE = "nudge", "PM nudge"
    SEAT = "seat", "Written by the PM for an agent"


class PMRequestStatus(models.TextChoices):
    OPEN = "open", "Open"
    ANSWERED = "answered", "Answered"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_TURN_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING)


# The most a person (or a program acting as one) may submit in one text: a PM
# message or answer, a goal, a role prompt, an anchor. Agents' own output is bounded
# by the model's max_tokens instead.
HUMAN_TEXT_LIMIT = 20_000
human_text = MaxLengthValidator(
    HUMAN_TEXT_LIMIT,
    "At most %(limit_value)s characters are accepted here (this text has %(show_value)s).",
)

# The caps on what an agent's tool call or an API request may submit (issue 22), one
# table in docs/api.md "Limits": a message, question, answer, prompt or summary shares
# a person's cap (HUMAN_TEXT_LIMIT); a name, an id, a role or a label is a short text;
# a workspace path and a file's content keep the workspace's own limits
# (teams.workspace.MAX_PATH_CHARS, MAX_WRITE_BYTES); a search query keeps the keepers'
# (teams.keepers.MAX_QUERY_CHARS); an anchor key its column's width (Anchor.key).
SHORT_TEXT_LIMIT = 200
PHASE_GUIDE_TEXT_LIMIT = 1000  # one line of a phase guide

# A team's plan grows with every phase summary, so it may be longer than one paste.
PLAN_LIMIT = 100_000
plan_text = MaxLengthValidator(
    PLAN_LIMIT, "A plan has at most %(limit_value)s characters (this one has %(show_value)s)."
)

PHASES_NEEDED = "A team needs at least one phase, each a non-empty name."


MAX_PHASES = 1000
PHASE_NAME_MAX = 60  # as Turn.phase and Message.phase store it


def validate_phases(value) -> None:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(p, str) and p.strip() for p in value)
    ):
        raise ValidationError(PHASES_NEEDED)
    if len(value) > MAX_PHASES or any(len(p) > PHASE_NAME_MAX or "\x00" in p for p in value):
        raise ValidationError(
            f"A team has at most {MAX_PHASES} phases, each named in at most "
            f"{PHASE_NAME_MAX} characters (no NUL characters)."
        )


def validate_tool_access(value) -> None:
    """{tool: {"roles": [role, ...], "phases": [phase, ...]}}, either list optional."""
    problem = (
        'Tool access is {"tool_name": {"roles": [...], "phases": [...]}}: lists of role '
        "and phase names (an empty list means all)."
    )
    if not isinstance(value, dict):
        raise ValidationError(problem)
    for rule in value.values():
        if not isinstance(rule, dict) or set(rule) - {"roles", "phases"}:
            raise ValidationError(problem)
        for names in rule.values():
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValidationError(problem)
        unknown = set(rule.get("roles", [])) - set(AgentRole.values)
        if unknown:
            raise ValidationError(
                f"Unknown role {sorted(unknown)[0]!r} in tool access; roles are "
                + ", ".join(AgentRole.values)
                + "."
            )


def validate_approvals(value) -> None:
    """{tool: "auto" | "ask" | "never"}."""
    policies = ("auto", "ask", "never")
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and v in policies for k, v in value.items()
    ):
        raise ValidationError('Approval policies are {"tool_name": "auto" | "ask" | "never"}.')


def validate_phase_guide(value) -> None:
    """{phase: {"produce": text, role: text, ...}}: texts of at most 1,000 characters."""
    problem = (
        'A phase guide is {"phase": {"produce": "...", "coder": "...", ...}}: a text per '
        "key, each at most 1,000 characters."
    )
    if not isinstance(value, dict):
        raise ValidationError(problem)
    for lines in value.values():
        if not isinstance(lines, dict):
            raise ValidationError(problem)
        for key, text in lines.items():
            if key != "produce" and key not in AgentRole.values:
                raise ValidationError(f"Unknown key {key!r} in the phase guide. {problem}")
            if not isinstance(text, str) or len(text) > PHASE_GUIDE_TEXT_LIMIT:
                raise ValidationError(problem)


def default_phases() -> list[str]:
    return list(DEFAULT_PHASES)


def new_query_key() -> str:
    return "q-" + uuid.uuid4().hex[:12]


class Team(models.Model):
    Status = TeamStatus

    slug = models.SlugField(
        max_length=60,
        unique=True,
        validators=[team_slug_validator],
        error_messages={"blank": team_slug_validator.message},
    )
    name = models.CharField(max_length=120)
    goal = models.TextField(blank=True, validators=[human_text])
    plan = models.TextField(
        blank=True,
        validators=[plan_text],
        help_text=(
            "Markdown. Agents refreshing their context see its '## Plan' section; the "
            "coach's phase summaries are added to it."
        ),
    )
    phases = models.JSONField(
        default=default_phases,
        validators=[validate_phases],
        error_messages={"blank": PHASES_NEEDED},
    )
    phase_index = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.IDLE)
    workspace = models.CharField(
        max_length=500, blank=True, help_text="Folder the agents' file tools may use."
    )
    # {tool name: "auto" | "ask" | "never"} for built-in tools (default auto); MCP
    # tools keep theirs on their server (McpServer.approval, .tool_approvals).
    tool_approvals = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_approvals],
        help_text='Built-in tools\' approval policies, e.g. {"tool_name": "ask"}; auto by '
        "default. MCP tools have theirs on their server.",
    )
    # The default workspace folder's name: the team's own, never its slug, so a rename
    # keeps the files and a later team given the old slug never reads them.
    folder = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    max_turns = models.PositiveIntegerField(
        default=200,
        validators=[MinValueValidator(1, "The turn budget must be at least 1.")],
        help_text="Turn budget.",
    )
    max_cost_usd = models.DecimalField(
        max_digits=10, decimal_places=4, default=Decimal("5.0000"), help_text="Cost budget."
    )
    turn_count = models.PositiveIntegerField(default=0)
    spent_usd = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal("0"), help_text="Cost of all turns."
    )
    # When 80% of each budget was first used (teams.budgets): a budget.warning goes
    # out once per budget.
    cost_warned_at = models.DateTimeField(null=True, blank=True, editable=False)
    turns_warned_at = models.DateTimeField(null=True, blank=True, editable=False)
    managers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="managed_teams"
    )
    # What each role does in each phase (teams.phase_guide has the defaults): the
    # team's own lines, {phase: {"produce": text, role: text}}; missing ones default.
    phase_guide = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_phase_guide],
        help_text=(
            'This team\'s own phase lines, e.g. {"planning": {"produce": "a task list", '
            '"coder": "estimate each task"}}; what is missing comes from Loom\'s defaults.'
        ),
    )
    # Who may use which tool, {tool: {"roles": [...], "phases": [...]}} (empty: all);
    # a tool not listed keeps its own default (tools.base.Tool.roles / phases).
    tool_access = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_tool_access],
        help_text=(
            'Who may use a tool, {"tool name": {"roles": ["coder"], "phases": '
            '["implementation"]}}; an empty list means every role or phase.'
        ),
    )
    # When the team asks for help (teams.stuck): 0 turns a check off.
    max_exchanges = models.PositiveSmallIntegerField(
        default=8,
        help_text="Stuck: more queries or forwards than this between the same two agents in "
        "a phase ask the PM (0: never).",
    )
    max_pass_rounds = models.PositiveSmallIntegerField(
        default=3,
        help_text="Stuck: this many rounds in a row where everyone passes, the phase still "
        "open, ask the PM (0: never).",
    )
    max_phase_turns = models.PositiveIntegerField(
        default=60,
        help_text="Stuck: a phase that has taken this many turns asks the PM (0: no limit).",
    )
    # The PM's choice of the next speaker (teams.steering): once, then the rotation.
    next_speaker = models.ForeignKey(
        "Agent",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
    )
    max_anchors = models.PositiveSmallIntegerField(
        default=30, help_text="Most anchors the team may have (the PM's and the agents')."
    )
    anchor_value_limit = models.PositiveIntegerField(
        default=2000, help_text="Most characters of an anchor value an agent saves."
    )
    consultants = models.ManyToManyField(
        "ConsultantProfile",
        blank=True,
        related_name="teams",
        help_text="The consultant profiles this team's agents may ask.",
    )
    context_version = models.PositiveIntegerField(
        default=0,
        help_text="Counts the changes to messages already written (an edit): a process "
        "that kept an agent's rendered history reads it again when this moves.",
    )
    # A fork (teams.forking) says where it came from, and what it holds of the
    # original's turns and spend: its own are turn_count - copied_turns and spent_usd.
    forked_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="forks"
    )
    forked_at = models.CharField(max_length=120, blank=True, editable=False)
    copied_turns = models.PositiveIntegerField(default=0, editable=False)
    copied_spent_usd = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal("0"), editable=False
    )
    # The sequence number of the team's last live event (teams.event_log): advanced by
    # an UPDATE in the transaction that commits the change, never by save().
    event_seq = models.PositiveBigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=Q(max_turns__gte=1), name="team_max_turns_positive"),
            models.CheckConstraint(
                condition=Q(status__in=TeamStatus.values),
                name="team_status_valid",
            ),
        ]

    def __str__(self):
        return self.name or self.slug

    def save(self, *args, **kwargs):
        """Every field but `event_seq`: an in-memory team read before an event was
        published must not set the team's sequence back."""
        if not self._state.adding and kwargs.get("update_fields") is None and self.pk:
            kwargs["update_fields"] = [
                f.name
                for f in self._meta.concrete_fields
                if not f.primary_key and f.name != "event_seq"
            ]
        super().save(*args, **kwargs)

    @property
    def phase(self) -> str:
        if not self.phases:
            return ""
        return self.phases[min(self.phase_index, len(self.phases) - 1)]


class Agent(models.Model):
    Role = AgentRole

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(
        max_length=40,
        validators=[agent_name_validator],
        error_messages={"blank": agent_name_validator.message},
    )
    role = models.CharField(
        max_length=20,
        choices=Role.choices,
        error_messages={
            "invalid_choice": "Unknown role %(value)r; choose one of "
            + ", ".join(AgentRole.values)
            + "."
        },
    )
    model = models.CharField(
        max_length=100,
        blank=True,
        help_text=(
            "Empty: the default model (LOOM_MODEL; unset, Claude with an API key, "
            "loom-offline without)."
        ),
    )
    role_prompt = models.TextField(blank=True, validators=[human_text])
    position = models.PositiveIntegerField(default=0, help_text="Order in the rotation.")
    context_budget_tokens = models.PositiveIntegerField(default=100_000)
    max_cost_usd = models.DecimalField(
        "cost budget",
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="This agent's own cost budget in USD; empty: none (the team's applies).",
    )
    # When 80% of its own cost budget was first used (teams.budgets): a budget.warning
    # naming the agent goes out once per cap.
    cost_warned_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The mesh hierarchy (seed 004).
    trajectory = models.TextField(blank=True, validators=[human_text])
    tactic = models.TextField(blank=True, validators=[human_text])
    action = models.TextField(blank=True, validators=[human_text])
    # The phase the trajectory is for: each phase begins with one Loom declares from
    # the role, the goal and the phase (teams.mesh), which the agent may refine.
    trajectory_phase = models.CharField(max_length=60, blank=True)
    # Metrics.
    turns = models.PositiveIntegerField(default=0)
    context_updates = models.PositiveIntegerField(default=0)
    last_context_update_turn = models.PositiveIntegerField(default=0)
    files_touched = models.JSONField(default=list, blank=True)
    violations = models.PositiveIntegerField(default=0)
    drift_score = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="agent_name_unique_in_team"),
            models.CheckConstraint(
                condition=Q(name__regex=AGENT_NAME_PATTERN), name="agent_name_mentionable"
            ),
            models.CheckConstraint(
                condition=Q(role__in=AgentRole.values),
                name="agent_role_valid",
            ),
            models.CheckConstraint(condition=Q(drift_score__lte=100), name="agent_drift_0_100"),
        ]

    def __str__(self):
        return f"{self.name} ({self.role})"

    @property
    def effective_model(self) -> str:
        return self.model or default_model()


class Turn(models.Model):
    Status = TurnStatus
    Outcome = TurnOutcome

    class Purpose(models.TextChoices):
        CONVERSATION = "conversation", "Conversation"
        INBOX = "inbox", "Inbox (woken by a query)"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="turn_set")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="turn_set")
    purpose = models.CharField(max_length=20, choices=Purpose.choices, default=Purpose.CONVERSATION)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default="", blank=True)
    phase = models.CharField(max_length=60, blank=True)
    number = models.PositiveIntegerField(default=0, help_text="The team's turn number.")
    claimed_by = models.CharField(max_length=120, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    snapshot_message_id = models.BigIntegerField(
        null=True, blank=True, help_text="The newest message this turn's context includes."
    )
    model = models.CharField(max_length=100, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_creation_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    drift_score = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    queued_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # One agent is never in two turns at once.
            models.UniqueConstraint(
                fields=["agent"],
                condition=Q(status__in=ACTIVE_TURN_STATUSES),
                name="one_active_turn_per_agent",
            ),
            models.CheckConstraint(
                condition=Q(status__in=TurnStatus.values),
                name="turn_status_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "queued_at"], name="turn_queue_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="turn_lease_idx"),
            models.Index(fields=["team", "number"], name="turn_team_number_idx"),
        ]

    def __str__(self):
        return f"turn {self.number} of {self.agent.name} ({self.status})"

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_tokens
            + self.cache_read_tokens
        )


class TurnStep(models.Model):
    """One persisted step of a turn: a model response or a tool result."""

    class Kind(models.TextChoices):
        MODEL = "model", "Model response"
        TOOL = "tool", "Tool result"

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    tool_name = models.CharField(max_length=60, blank=True)
    content = models.JSONField(help_text="Anthropic content blocks of this step.")
    # A tool step that ends the turn says how, so a resumed turn ends the same way.
    ends_turn = models.CharField(
        max_length=20, choices=TurnOutcome.choices, default=TurnOutcome.NONE, blank=True
    )
    end_reason = models.TextField(blank=True)
    # A model step keeps the request it answered (zlib-compressed JSON of system,
    # messages and tools: teams.requests), so people see exactly what the model read.
    request = models.BinaryField(null=True, blank=True, editable=False)
    # sha256 of the request's system, messages and tools (teams.requests.request_digest):
    # a replay compares it to tell where a run diverges.
    request_digest = models.CharField(max_length=64, blank=True, editable=False)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_creation_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn", "index"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "index"], name="turn_step_index_unique"),
        ]

    def __str__(self):
        return f"step {self.index} ({self.kind})"


class Query(models.Model):
    Status = QueryStatus

    key = models.CharField(max_length=20, unique=True, default=new_query_key, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="queries")
    origin = models.ForeignKey(
        Agent, on_delete=models.CASCADE, related_name="queries_asked", null=True, blank=True
    )
    target = models.ForeignKey(
        Agent,
        on_delete=models.SET_NULL,
        related_name="queries_targeted",
        null=True,
        blank=True,
        help_text="Empty: broadcast.",
    )
    question = models.TextField()
    hops = models.JSONField(default=list, blank=True, help_text="The hop chain.")
    enrichments = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    answer = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, related_name="queries_answered", null=True, blank=True
    )
    max_hops = models.PositiveSmallIntegerField(default=5)
    ttl_seconds = models.PositiveIntegerField(default=3600)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "queries"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=QueryStatus.values), name="query_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status=QueryStatus.ANSWERED) | Q(answered_at__isnull=False),
                name="query_answered_has_time",
            ),
        ]
        indexes = [models.Index(fields=["status", "expires_at"], name="query_open_expiry_idx")]

    def __str__(self):
        return self.key

    @property
    def hop_count(self) -> int:
        return sum(1 for hop in self.hops if hop.get("kind") == "forward")

    def hop_lines(self) -> list[str]:
        """The hop chain in words, for people."""
        lines = []
        for hop in self.hops:
            kind, sender, to = hop.get("kind"), hop.get("from", "?"), hop.get("to", "")
            target = "everyone" if to == "*" else to
            if kind == "ask":
                lines.append(f"{sender} asked {target}")
            elif kind == "forward":
                lines.append(f"{sender} forwarded to {target}: {hop.get('enrichment', '')}")
            elif kind == "answer":
                lines.append(f"{sender} answered")
            elif kind == "expire":
                lines.append("expired unanswered")
        return lines


class Message(models.Model):
    """An entry of a team's conversation (recipient empty) or of an agent's inbox."""

    Kind = MessageKind

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="messages")
    author = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="messages_written"
    )
    author_label = models.CharField(
        max_length=60, blank=True, help_text="Shown when there is no author agent (pm, system)."
    )
    recipient = models.ForeignKey(
        Agent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="inbox",
        help_text="Empty: the team conversation.",
    )
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.CHAT)
    phase = models.CharField(max_length=60, blank=True)
    content = models.TextField()
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    query = models.ForeignKey(
        Query, on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=MessageKind.values), name="message_kind_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["team", "phase", "id"], name="message_conversation_idx"),
            models.Index(fields=["recipient", "id"], name="message_inbox_idx"),
            models.Index(fields=["team", "kind", "id"], name="message_team_kind_idx"),
        ]

    def __str__(self):
        return f"{self.speaker}: {self.content[:60]}"

    @property
    def speaker(self) -> str:
        if self.author_id and self.kind == MessageKind.SEAT:
            return f"{self.author.name} (written by the PM)"
        if self.author_id:
            return self.author.name
        return self.author_label or self.kind


class LiveEvent(models.Model):
    """A live event of a team as it was published (teams.event_log), by its per-team
    sequence number: what a socket that missed it is sent from the database. The
    newest LIVE_EVENTS_KEPT of each team are kept."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="live_events")
    seq = models.PositiveBigIntegerField()
    name = models.CharField(max_length=64)
    payload = models.JSONField()  # the event's wire form, its name and seq included
    # The agent (id) the event is private to (teams.events.audience_allows), or null.
    private_to = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["team", "seq"], name="live_event_team_seq_unique"),
        ]

    def __str__(self):
        return f"{self.team_id}#{self.seq} {self.name}"


class Keeper(models.Model):
    """A topic-labelled store of messages an agent offloaded."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="keepers")
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="keepers"
    )
    topic = models.CharField(max_length=200)
    index_entry = models.TextField(blank=True, help_text="One-line summary of what is kept.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["team", "agent"], name="keeper_team_agent_idx")]

    def __str__(self):
        return f"{self.topic} (keeper {self.pk})"


class KeeperEntry(models.Model):
    keeper = models.ForeignKey(Keeper, on_delete=models.CASCADE, related_name="entries")
    message = models.ForeignKey(
        Message, on_delete=models.SET_NULL, null=True, blank=True, related_name="keeper_entries"
    )
    position = models.PositiveIntegerField()
    role = models.CharField(max_length=60)
    content = models.TextField()

    class Meta:
        ordering = ["keeper", "position"]
        verbose_name_plural = "keeper entries"
        constraints = [
            models.UniqueConstraint(fields=["keeper", "position"], name="keeper_entry_position"),
        ]

    def __str__(self):
        return f"[{self.role}]: {self.content[:60]}"


class AnchorSource(models.TextChoices):
    PM = "pm", "PM"
    PM_ANSWER = "pm_answer", "PM answer"
    AGENT = "agent", "Agent"


class Anchor(models.Model):
    """An immutable-by-offload fact: injected into every system prompt of the team."""

    Source = AnchorSource

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="anchors")
    key = models.CharField(
        max_length=80,
        validators=[
            RegexValidator(
                ANCHOR_KEY_PATTERN,
                "Anchor keys start with a letter or digit and use letters, digits, _ . : -",
            )
        ],
    )
    value = models.TextField(validators=[human_text])
    updated_by = models.CharField(max_length=60, blank=True)
    # Who pinned the value and in which phase: the prompts' anchors block says so.
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.PM)
    phase = models.CharField(max_length=60, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "key"]
        constraints = [
            models.UniqueConstraint(fields=["team", "key"], name="anchor_key_unique_in_team"),
        ]

    def __str__(self):
        return f"{self.key} = {self.value[:60]}"

    def source_text(self) -> str:
        """Who pinned it, and in which phase: "the PM", "the PM's answer in
        refinement", "coder in planning" (the agent's name)."""
        where = f" in {self.phase}" if self.phase else ""
        if self.source == Anchor.Source.AGENT:
            return f"{self.updated_by or 'an agent'}{where}"
        if self.source == Anchor.Source.PM_ANSWER:
            return f"the PM's answer{where}"
        return f"the PM{where}"


class AnchorRevision(models.Model):
    """One change of an anchor: its new value, or its deletion. Kept by team and key,
    so an anchor's history outlives the anchor (deleted, then pinned again)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="anchor_revisions")
    key = models.CharField(max_length=80)
    anchor = models.ForeignKey(
        Anchor, on_delete=models.SET_NULL, null=True, blank=True, related_name="revisions"
    )
    value = models.TextField(blank=True)
    deleted = models.BooleanField(default=False)
    changed_by = models.CharField(max_length=60, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "key", "-id"]
        indexes = [models.Index(fields=["team", "key", "-id"], name="anchor_revision_history_idx")]

    def __str__(self):
        return f"{self.key} @ {self.created_at:%Y-%m-%d %H:%M}"


class PMRequestKind(models.TextChoices):
    QUESTION = "question", "Question"
    BUDGET = "budget", "Budget"
    APPROVAL = "approval", "Approval"
    STUCK = "stuck", "Stuck"  # the team asks for help (teams.stuck)


class ApprovalPolicy(models.TextChoices):
    """Whether a tool call runs at once, waits for the PM's approval, or is not offered."""

    AUTO = "auto", "Run without asking"
    ASK = "ask", "Ask the PM first"
    NEVER = "never", "Never (not offered)"


# The answers to an approval request (teams.approvals).
APPROVE, ALWAYS_APPROVE, DENY = "Approve", "Always approve", "Deny"
APPROVAL_CHOICES = (APPROVE, ALWAYS_APPROVE, DENY)


class BudgetKind(models.TextChoices):
    NONE = "", "—"
    COST = "cost", "Cost"
    TURNS = "turns", "Turns"


# The quick answers to a budget request (teams.budgets); a new cap is the other.
BUDGET_CHOICES = ("Raise by 50%", "Double", "Stop")

# The answers to a stuck request (teams.stuck).
STUCK_CHOICES = ("Close the phase", "Let them go on", "Pause")


class PMRequest(models.Model):
    Status = PMRequestStatus
    Kind = PMRequestKind

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="pm_requests")
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="pm_requests"
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="pm_requests"
    )
    question = models.TextField()
    # A budget request (teams.budgets) is answered with a new cap, not with words.
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.QUESTION)
    budget = models.CharField(
        max_length=10,
        choices=BudgetKind.choices,
        blank=True,
        help_text="Which budget a budget request is about (the agent's own when it has one).",
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    answer = models.TextField(blank=True, validators=[human_text])
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    # An approval request is about one tool call of a turn's step: which, with which
    # arguments; the answer may carry a note for the agent and edited arguments.
    tool_name = models.CharField(max_length=100, blank=True)
    tool_use_id = models.CharField(max_length=100, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    input_schema = models.JSONField(null=True, blank=True)  # edited arguments must fit it
    approved_arguments = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True, validators=[human_text])
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = "PM request"
        constraints = [
            models.UniqueConstraint(
                fields=["team"],
                condition=Q(status=PMRequestStatus.OPEN),
                name="one_open_pm_request_per_team",
            ),
            models.CheckConstraint(
                condition=Q(status__in=PMRequestStatus.values),
                name="pm_request_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=PMRequestKind.values), name="pm_request_kind_valid"
            ),
        ]
        indexes = [models.Index(fields=["status", "-created_at"], name="pm_request_inbox_idx")]

    def __str__(self):
        return f"{self.team.slug}: {self.question[:60]}"

    @property
    def arguments_json(self) -> str:
        """An approval request's arguments as the PM reads and edits them."""
        if self.arguments is None:
            return ""
        return json.dumps(self.arguments, indent=2, ensure_ascii=False)


class ProviderKind(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic (Claude)"
    OPENAI = "openai", "OpenAI-compatible (GPT, Gemini, vLLM, Ollama, ...)"
    OFFLINE = "offline", "Offline (loom-offline, no key)"


ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]{0,99}$"


def validate_key_env(value: str) -> None:
    """A consultant's key variable names an API key, never one of Loom's own settings
    (its key would be sent to the consultant's server)."""
    if value.startswith(("LOOM_", "DJANGO_")) or not value.endswith(("_KEY", "_TOKEN")):
        raise ValidationError(
            "Name a variable holding an API key, ending in _KEY or _TOKEN (e.g. "
            "OPENAI_API_KEY); Loom's own LOOM_ and DJANGO_ variables are refused."
        )


class ConsultantProfile(models.Model):
    """Another model an agent may consult for a second opinion. The key is never
    stored: `key_env` names the environment variable that holds it."""

    Provider = ProviderKind

    name = models.CharField(max_length=60, unique=True, validators=[agent_name_validator])
    provider = models.CharField(max_length=20, choices=Provider.choices, default=Provider.OFFLINE)
    model = models.CharField(max_length=100)
    base_url = models.URLField(
        max_length=300, blank=True, help_text="Empty: the provider's default endpoint."
    )
    key_env = models.CharField(
        "key variable",
        max_length=100,
        blank=True,
        validators=[
            RegexValidator(
                ENV_NAME_PATTERN, "The NAME of an environment variable, e.g. OPENAI_API_KEY."
            ),
            validate_key_env,
        ],
        help_text="The name of the environment variable holding the key (never the key).",
    )
    strengths = models.TextField(
        blank=True, validators=[human_text], help_text="What this consultant is good at."
    )
    extra_prompt = models.TextField(
        blank=True, validators=[human_text], help_text="Added to every request it gets."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(provider__in=ProviderKind.values), name="consultant_provider_valid"
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.model})"


class Consultation(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="consultations")
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="consultations"
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="consultations"
    )
    profile = models.ForeignKey(
        ConsultantProfile, on_delete=models.SET_NULL, null=True, related_name="consultations"
    )
    batch = models.UUIDField(
        default=uuid.uuid4,
        help_text="Shared by the consultations of one ask of several consultants.",
    )
    prompt = models.TextField()
    task_type = models.CharField(max_length=40, blank=True)
    relevant_files = models.JSONField(default=list, blank=True)
    focus_areas = models.JSONField(default=list, blank=True)
    context = models.TextField(blank=True)
    custom_prompt = models.TextField(blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    output = models.JSONField(null=True, blank=True, help_text="The structured PeerOutput.")
    flagged_files = models.JSONField(
        default=list, blank=True, help_text="File references dropped: missing or outside."
    )
    model = models.CharField(max_length=100, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    duration_seconds = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["batch"], name="consultation_batch_idx"),
            models.Index(fields=["team", "-id"], name="consultation_team_idx"),
        ]

    def __str__(self):
        return f"consultation {self.pk} ({self.status})"


class WorkspaceFile(models.Model):
    """Who last wrote a file of a team's workspace, in which turn: the PM's view of
    the team's output (the file itself lives in the workspace folder)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="workspace_files")
    path = models.CharField(max_length=500, help_text="Relative to the workspace.")
    size = models.PositiveBigIntegerField(default=0)
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="files_written"
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="files_written"
    )
    writes = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "path"]
        constraints = [
            models.UniqueConstraint(fields=["team", "path"], name="workspace_file_unique_path"),
        ]

    def __str__(self):
        return self.path


class FileBlob(models.Model):
    """A file's content, stored once by its SHA-256 whoever wrote it (teams.revisions)."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.PositiveBigIntegerField()
    content = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.sha256[:12]} ({self.size} bytes)"


class FileRevision(models.Model):
    """One write of a workspace file: which content, by whom, in which turn."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="file_revisions")
    path = models.CharField(max_length=500)
    blob = models.ForeignKey(FileBlob, on_delete=models.PROTECT, related_name="revisions")
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="file_revisions"
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="file_revisions"
    )
    number = models.PositiveIntegerField(help_text="1 for a file's first revision, then 2...")
    note = models.CharField(max_length=160, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "path", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "path", "number"], name="file_revision_number_unique"
            ),
        ]

    def __str__(self):
        return f"{self.path} r{self.number}"


class ReplayStatus(models.TextChoices):
    RUNNING = "running", "Running"
    MATCHED = "matched", "Matched to the end"
    DIVERGED = "diverged", "Diverged"
    STOPPED = "stopped", "Stopped (turn limit)"


class Replay(models.Model):
    """A replay of a team's recorded run (teams.engine.replay): the team it made,
    how far it matched and, when it diverged, where and how."""

    Status = ReplayStatus

    source = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, related_name="replays_of"
    )
    source_slug = models.CharField(max_length=60)
    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="replay")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    until_turn = models.PositiveIntegerField(null=True, blank=True)
    turns_replayed = models.PositiveIntegerField(default=0)
    model_steps = models.PositiveIntegerField(default=0)
    diverged_turn = models.PositiveIntegerField(null=True, blank=True)
    diverged_agent = models.CharField(max_length=40, blank=True)
    reason = models.TextField(blank=True)
    diff = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"replay of {self.source_slug} as {self.team.slug} ({self.status})"


class ApiToken(models.Model):
    """A REST API token; only its SHA-256 is stored.

    A team token reaches one team (and, bound to an agent, acts only as that agent);
    an account token acts with its staff user's rights."""

    PREFIX_LENGTH = 12

    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="api_tokens"
    )
    agent = models.ForeignKey(
        Agent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="Set: the token acts only as this agent.",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="Set: an account token, with this staff user's rights (no team).",
    )
    name = models.CharField("label", max_length=80, blank=True)
    prefix = models.CharField(max_length=PREFIX_LENGTH, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Empty: never expires. Past it, every use is a 401."
    )
    read_only = models.BooleanField(
        default=False, help_text="Reads only: no writes, no tools (403 with the reason)."
    )

    class Meta:
        ordering = ["-id"]
        verbose_name = "API token"
        constraints = [
            models.CheckConstraint(
                condition=(Q(team__isnull=False) & Q(user__isnull=True))
                | (Q(team__isnull=True) & Q(user__isnull=False) & Q(agent__isnull=True)),
                name="api_token_team_xor_user",
            ),
        ]

    def __str__(self):
        return f"{self.name or 'token'} ({self.prefix}…)"

    @staticmethod
    def hash_key(raw_key: str) -> str:
        return hashlib.sha256(raw_key.encode()).hexdigest()


# --- webhooks ------------------------------------------------------------------


class WebhookEvent(models.TextChoices):
    """What a team's webhooks may be told about (teams.webhooks says when)."""

    PM_REQUEST_OPENED = "pm_request.opened", "PM request opened"
    TEAM_DONE = "team.done", "Team done"
    TEAM_FAILED = "team.failed", "Team failed (a turn failed and paused it)"
    BUDGET_WARNING = "budget.warning", "Budget warning (80% of turns or cost used)"
    APPROVAL_REQUESTED = "approval.requested", "Approval requested (a tool call waits)"
    DRIFT_ALERT = "drift.alert", "Drift alert (an agent in significant drift two turns running)"


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERING = "delivering", "Delivering"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


WEBHOOK_URL_MAX = 500
webhook_url_validator = RegexValidator(
    r"^https?://[^\s/?#@]+(?:[/?#]\S*)?$",
    "A webhook URL is an http:// or https:// address with a host, e.g. "
    "https://hooks.example.com/loom.",
)


def validate_webhook_url(value: str) -> None:
    """http or https with a host and a usable port, leading to no private address
    (teams.outbound); nothing else is ever posted to."""
    webhook_url_validator(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValidationError(webhook_url_validator.message) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(webhook_url_validator.message)
    outbound.validate_url(value)


WEBHOOK_EVENTS_NEEDED = (
    "Choose at least one event, each once: " + ", ".join(WebhookEvent.values) + "."
)


def validate_webhook_events(value) -> None:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(e, str) for e in value)
        or len(set(value)) != len(value)
    ):
        raise ValidationError(WEBHOOK_EVENTS_NEEDED)
    unknown = [e for e in value if e not in WebhookEvent.values]
    if unknown:
        choices = ", ".join(WebhookEvent.values)
        raise ValidationError(f"Unknown event {unknown[0][:60]!r}; choose among {choices}.")


class Webhook(models.Model):
    """Where a team's events are POSTed, signed with the webhook's own secret.

    The secret is stored encrypted (teams.webhooks: Fernet, with a key derived from
    the site's SECRET_KEY) and shown once, when the webhook is made."""

    Event = WebhookEvent

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="webhooks")
    url = models.CharField(
        "URL",
        max_length=WEBHOOK_URL_MAX,
        validators=[validate_webhook_url],
        error_messages={"blank": webhook_url_validator.message},
    )
    events = models.JSONField(
        validators=[validate_webhook_events],
        error_messages={"blank": WEBHOOK_EVENTS_NEEDED},
        help_text="The events POSTed to the URL: " + ", ".join(WebhookEvent.values) + ".",
    )
    secret_encrypted = models.TextField(editable=False)
    secret_prefix = models.CharField(
        max_length=12, editable=False, help_text="The secret's first characters, to tell it."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "url"], name="webhook_url_unique_in_team"),
            models.CheckConstraint(
                condition=Q(url__startswith="http://") | Q(url__startswith="https://"),
                name="webhook_url_http",
            ),
        ]

    def __str__(self):
        return f"{self.team.slug} → {self.url}"


class WebhookDelivery(models.Model):
    """One event to POST to one webhook, retried with backoff until it is delivered
    or given up on. Written in the transaction of the change it reports, so a
    restart loses none; teams.engine.deliveries sends it."""

    Status = WebhookDeliveryStatus

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40, choices=WebhookEvent.choices)
    payload = models.JSONField(help_text="The JSON body POSTed, as it is signed.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When it is due (pending); empty once it is settled."
    )
    claimed_by = models.CharField(max_length=120, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=WebhookDeliveryStatus.values),
                name="webhook_delivery_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(event__in=WebhookEvent.values), name="webhook_delivery_event_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status=WebhookDeliveryStatus.DELIVERED)
                | Q(delivered_at__isnull=False),
                name="webhook_delivered_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(status=WebhookDeliveryStatus.PENDING)
                | Q(next_attempt_at__isnull=False),
                name="webhook_pending_has_due_time",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="webhook_delivery_lease_idx"),
            models.Index(fields=["webhook", "id"], name="webhook_delivery_log_idx"),
        ]

    def __str__(self):
        return f"{self.event} #{self.pk} ({self.status})"


class WorkerHeartbeat(models.Model):
    """A turn worker's sign of life, written every few seconds while it runs
    (teams.health): /healthz counts the workers seen within two leases."""

    worker = models.CharField(max_length=120, unique=True, help_text="host:pid:nonce")
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    running_turns = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self):
        return f"{self.worker} ({self.running_turns} running)"


class ModelPrice(models.Model):
    """What a model's tokens cost, USD per million (teams.catalog.cost_of reads this
    table). `model` is a model id or a prefix of ids; the longest matching one wins."""

    model = models.CharField(
        max_length=100, unique=True, help_text="A model id, or a prefix such as claude-sonnet."
    )
    input_usd = models.DecimalField(
        "input", max_digits=10, decimal_places=4, help_text="USD per million input tokens."
    )
    output_usd = models.DecimalField(
        "output", max_digits=10, decimal_places=4, help_text="USD per million output tokens."
    )
    cache_write_usd = models.DecimalField(
        "cache write",
        max_digits=10,
        decimal_places=4,
        help_text="USD per million tokens written to the prompt cache (usually 1.25x input).",
    )
    cache_read_usd = models.DecimalField(
        "cache read",
        max_digits=10,
        decimal_places=4,
        help_text="USD per million tokens read from the prompt cache (usually 0.1x input).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]
        verbose_name = "model price"
        constraints = [
            models.CheckConstraint(
                condition=Q(input_usd__gte=0)
                & Q(output_usd__gte=0)
                & Q(cache_write_usd__gte=0)
                & Q(cache_read_usd__gte=0),
                name="model_price_not_negative",
            ),
        ]

    def __str__(self):
        return self.model

    def save(self, *args, **kwargs):
        super().save(*args, **kwargs)
        prices_changed()

    def delete(self, *args, **kwargs):
        result = super().delete(*args, **kwargs)
        prices_changed()
        return result


def prices_changed() -> None:
    catalog.prices_invalidate()


def price_rows():
    for row in ModelPrice.objects.all():
        price = catalog.Price(
            row.input_usd, row.output_usd, row.cache_write_usd, row.cache_read_usd
        )
        yield row.model, price


class ModelCall(models.Model):
    """A model call a tool made besides the turn's own (smart retrieval asks the
    agent's model about a keeper's excerpts): counted on its turn or team as usual,
    recorded here so the spend can say what it was for. Consultations have rows of
    their own (Consultation)."""

    class Purpose(models.TextChoices):
        SMART_RETRIEVAL = "smart_retrieval", "Smart retrieval"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="model_calls")
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="model_calls"
    )
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="model_calls"
    )
    purpose = models.CharField(max_length=30, choices=Purpose.choices)
    model = models.CharField(max_length=100, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_creation_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    reply = models.TextField(blank=True, help_text="What the model answered (a replay reuses it).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["team", "purpose"], name="model_call_team_idx")]

    def __str__(self):
        return f"{self.purpose} ({self.model})"


# --- MCP servers ---------------------------------------------------------------------


class McpTransport(models.TextChoices):
    STDIO = "stdio", "stdio (a command on the Loom host)"
    HTTP = "http", "Streamable HTTP"


MCP_NAME_PATTERN = r"^[a-z0-9-]{1,32}$"
mcp_name_validator = RegexValidator(
    MCP_NAME_PATTERN, "A server name is 1-32 lowercase letters, digits or dashes."
)


class McpServer(models.Model):
    """A Model Context Protocol server whose tools a team's agents may call, as
    `<name>__<tool>`. Environment and header values are never stored: only the names
    of the variables that hold them."""

    Transport = McpTransport

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=32, validators=[mcp_name_validator])
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.JSONField(
        default=list, blank=True, help_text="stdio: the program, then its arguments."
    )
    env_vars = models.JSONField(
        default=list, blank=True, help_text="stdio: names of variables passed to it."
    )
    url = models.CharField(max_length=500, blank=True, help_text="http: the server's URL.")
    header_vars = models.JSONField(
        default=dict, blank=True, help_text="http: header name -> variable holding its value."
    )
    roles = models.JSONField(default=list, blank=True, help_text="Empty: every role.")
    phases = models.JSONField(default=list, blank=True, help_text="Empty: every phase.")
    approval = models.CharField(
        max_length=10, choices=ApprovalPolicy.choices, default=ApprovalPolicy.ASK
    )
    tool_approvals = models.JSONField(
        default=dict, blank=True, help_text="Tool name -> auto, ask or never."
    )
    # The server's tool list as last listed (name, description, input_schema), and
    # its health: empty error = healthy.
    tools = models.JSONField(default=list, blank=True, editable=False)
    listed_at = models.DateTimeField(null=True, blank=True, editable=False)
    error = models.TextField(blank=True, editable=False)
    error_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "name"]
        verbose_name = "MCP server"
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="mcp_server_unique_name"),
            models.CheckConstraint(
                condition=Q(transport__in=McpTransport.values), name="mcp_server_transport_valid"
            ),
            models.CheckConstraint(
                condition=Q(approval__in=ApprovalPolicy.values), name="mcp_server_approval_valid"
            ),
        ]

    def __str__(self):
        return f"{self.team.slug}: {self.name}"

    @property
    def healthy(self) -> bool:
        return not self.error
