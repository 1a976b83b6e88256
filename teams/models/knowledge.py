"""What a team keeps: keepers and their entries, anchors and their revisions."""


from django.core.validators import RegexValidator
from django.db import models

from teams.models.choices import ANCHOR_KEY_PATTERN, human_text
from teams.models.conversation import Message
from teams.models.team import Agent, Team


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
