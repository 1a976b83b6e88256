"""The work a team does: turns and their steps, model calls and their prices, the
workers' heartbeats, replays."""

from decimal import Decimal

from django.db import models
from django.db.models import Q

from teams.lib import catalog
from teams.models.choices import ACTIVE_TURN_STATUSES, TurnOutcome, TurnStatus
from teams.models.team import Agent, Team


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
    # messages and tools: teams.history.model_requests), so people see exactly what the model read.
    request = models.BinaryField(null=True, blank=True, editable=False)
    # sha256 of the request's system, messages and tools
    # (teams.history.model_requests.request_digest): a replay compares it to tell where a
    # run diverges.
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




class WorkerHeartbeat(models.Model):
    """A turn worker's sign of life, written every few seconds while it runs
    (teams.observability.health): /healthz counts the workers seen within two leases."""

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
    """What a model's tokens cost, USD per million (teams.lib.catalog.cost_of reads this
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
        EVAL_JUDGE = "eval_judge", "Eval judge"

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
