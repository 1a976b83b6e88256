"""The conversation: messages, queries between agents, PM requests, live events."""

import json
import re

from django.conf import settings
from django.db import models
from django.db.models import Q

from teams.models.choices import (
    MessageKind,
    PMRequestStatus,
    QueryStatus,
    human_text,
    new_query_key,
)
from teams.models.team import Agent, Team
from teams.models.work import Turn


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
    """A live event of a team as it was published (teams.live.event_log), by its per-team
    sequence number: what a socket that missed it is sent from the database. The
    newest LIVE_EVENTS_KEPT of each team are kept."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="live_events")
    seq = models.PositiveBigIntegerField()
    name = models.CharField(max_length=64)
    payload = models.JSONField()  # the event's wire form, its name and seq included
    # The agent (id) the event is private to (teams.live.events.audience_allows), or null.
    private_to = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["team", "seq"], name="live_event_team_seq_unique"),
        ]

    def __str__(self):
        return f"{self.team_id}#{self.seq} {self.name}"


class PMRequestKind(models.TextChoices):
    QUESTION = "question", "Question"
    BUDGET = "budget", "Budget"
    APPROVAL = "approval", "Approval"
    STUCK = "stuck", "Stuck"  # the team asks for help (teams.run.stuck)


class ApprovalPolicy(models.TextChoices):
    """Whether a tool call runs at once, waits for the PM's approval, or is not offered."""

    AUTO = "auto", "Run without asking"
    ASK = "ask", "Ask the PM first"
    NEVER = "never", "Never (not offered)"


# The answers to an approval request (teams.conversation.approvals).
APPROVE, ALWAYS_APPROVE, DENY = "Approve", "Always approve", "Deny"
APPROVAL_CHOICES = (APPROVE, ALWAYS_APPROVE, DENY)


class BudgetKind(models.TextChoices):
    NONE = "", "—"
    COST = "cost", "Cost"
    TURNS = "turns", "Turns"


# The quick answers to a budget request (teams.run.budgets); a new cap is the other.
BUDGET_CHOICES = ("Raise by 50%", "Double", "Stop")

# The answers to a stuck request (teams.run.stuck).
STUCK_CHOICES = ("Close the phase", "Let them go on", "Pause")


# "Why (<agent>): <text>" up to the line of choices, in an approval's question.
APPROVAL_WHY = re.compile(r"\n\nWhy \([^)\n]*\): (?P<why>.*?)(?:\n\nApprove, Always|\Z)", re.S)


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
    # A budget request (teams.run.budgets) is answered with a new cap, not with words.
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

    @property
    def arguments_shown(self) -> list[tuple[str, str]]:
        """An approval request's arguments as the PM reads them: each name with its
        value, a text as it is (its lines as lines), anything else as indented JSON."""
        if not isinstance(self.arguments, dict):
            return []
        return [
            (name, value if isinstance(value, str) else json.dumps(value, indent=2))
            for name, value in self.arguments.items()
        ]

    @property
    def why(self) -> str:
        """An approval request's reason: the agent's text of the step that made the call,
        as teams.conversation.approvals.approval_question put it in the question."""
        found = APPROVAL_WHY.search(self.question) if self.kind == PMRequestKind.APPROVAL else None
        return found["why"].strip() if found else ""
