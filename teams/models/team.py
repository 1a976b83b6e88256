"""A team and its agents."""

import uuid
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from teams.lib import endpoints
from teams.lib.catalog import default_max_tokens, default_model
from teams.models.choices import (
    AGENT_NAME_PATTERN,
    PHASES_NEEDED,
    AgentRole,
    TeamStatus,
    agent_name_validator,
    default_phases,
    human_text,
    plan_text,
    team_slug_validator,
    validate_approvals,
    validate_phase_guide,
    validate_phases,
    validate_tool_access,
)


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
    # When 80% of each budget was first used (teams.run.budgets): a budget.warning goes
    # out once per budget.
    cost_warned_at = models.DateTimeField(null=True, blank=True, editable=False)
    turns_warned_at = models.DateTimeField(null=True, blank=True, editable=False)
    managers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="managed_teams"
    )
    # What each role does in each phase (teams.conversation.phase_guide has the defaults): the
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
    # When the team asks for help (teams.run.stuck): 0 turns a check off.
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
    # The PM's choice of the next speaker (teams.run.steering): once, then the rotation.
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
    # A fork (teams.history.forking) says where it came from, and what it holds of the
    # original's turns and spend: its own are turn_count - copied_turns and spent_usd.
    forked_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="forks"
    )
    forked_at = models.CharField(max_length=120, blank=True, editable=False)
    copied_turns = models.PositiveIntegerField(default=0, editable=False)
    copied_spent_usd = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal("0"), editable=False
    )
    # A2A (teams.a2a): a published team is a template other agents hire; each hire is a
    # fresh copy of it (a "run") that says which template and which caller's token made it.
    a2a = models.BooleanField(
        "published over A2A",
        default=False,
        help_text="Other agents may hire this team over the A2A protocol: each message "
        "they send starts a fresh copy of it, with the message as its goal.",
    )
    hired_from = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="hired_runs",
        editable=False,
        help_text="The published team this run was hired from over A2A.",
    )
    hired_by = models.CharField(
        max_length=120,
        blank=True,
        editable=False,
        help_text="The label of the API token that hired this run over A2A.",
    )
    hire_canceled_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the hirer canceled this run over A2A (the run was paused).",
    )
    # The sequence number of the team's last live event (teams.live.event_log): advanced by
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
    max_tokens = models.PositiveIntegerField(
        "reply token limit",
        null=True,
        blank=True,
        validators=[MinValueValidator(256), MaxValueValidator(128_000)],
        help_text="The most tokens one reply may hold (256 to 128,000); empty: the model's "
        "default (8,192 for Claude models).",
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
    # When 80% of its own cost budget was first used (teams.run.budgets): a budget.warning
    # naming the agent goes out once per cap.
    cost_warned_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The mesh hierarchy (seed 004).
    trajectory = models.TextField(blank=True, validators=[human_text])
    tactic = models.TextField(blank=True, validators=[human_text])
    action = models.TextField(blank=True, validators=[human_text])
    # The phase the trajectory is for: each phase begins with one Loom declares from
    # the role's work in the phase (teams.conversation.hierarchy), which the agent may refine.
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

    def max_tokens_for(self, model: str) -> int:
        """The max_tokens of this agent's requests to `model`: its own, else the model's
        default (teams.lib.catalog.default_max_tokens)."""
        return self.max_tokens or default_max_tokens(model)

    @property
    def reply_tokens(self) -> int:
        """The max_tokens of its requests to its model now."""
        return self.max_tokens_for(self.effective_model)

    @property
    def endpoint(self) -> str:
        """The endpoint its model id routes to; "" for the offline model (or an id no
        endpoint serves)."""
        found = endpoints.route(self.effective_model).endpoint
        return found.name if found is not None else ""
