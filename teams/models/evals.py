"""Eval runs: a suite run against fresh teams, one case per team, and what its checks
found (teams.evals)."""

from decimal import Decimal

from django.conf import settings as django_settings
from django.db import models
from django.db.models import Q

from teams.models.choices import EvalCaseStatus, EvalRunStatus
from teams.models.team import Team


class EvalRun(models.Model):
    Status = EvalRunStatus

    suite_name = models.CharField(max_length=120)
    # The suite as it ran (after --set), so a rescore or a reader sees what was asked.
    suite = models.JSONField()
    # {"repeat", "set", "concurrency", "source"}: how it was started.
    settings = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    judge_spent_usd = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal("0"), help_text="What its judges cost."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = "eval run"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=EvalRunStatus.values), name="eval_run_status_valid"
            )
        ]

    def __str__(self):
        return f"Eval run {self.pk} ({self.suite_name})"


class EvalCase(models.Model):
    """One case of a run, one repeat: its team, and once scored its checks' results."""

    Status = EvalCaseStatus

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="cases")
    case = models.CharField(max_length=120)
    repeat = models.PositiveIntegerField(default=1)
    # The team is the eval's: its admin row and live view say so (Team.eval_case).
    team = models.OneToOneField(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="eval_case"
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    passed = models.BooleanField(null=True, blank=True, help_text="Null until scored.")
    # [{"kind", "passed", "detail"}], in the suite's order.
    checks = models.JSONField(default=list, blank=True)
    stop_reason = models.TextField(blank=True, help_text="Why the team stopped early.")
    answers_used = models.PositiveIntegerField(default=0)
    # The team's own work when it stopped (a judge's calls are the run's, not the case's).
    turns = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    seconds = models.FloatField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    scored_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "id"]
        verbose_name = "eval case"
        constraints = [
            models.UniqueConstraint(fields=["run", "case", "repeat"], name="eval_case_unique"),
            models.CheckConstraint(
                condition=Q(status__in=EvalCaseStatus.values), name="eval_case_status_valid"
            ),
        ]

    def __str__(self):
        return f"{self.case} #{self.repeat}"

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens
