"""Eval runs as rows: create one (a team per case and repeat, nothing created when the
suite cannot run), advance it (start queued cases up to the concurrency, answer the
PM's requests from the script, stop the cases whose teams finished, stopped or ran
out of time), and record what the checks found.

The model calls (the teams' turns, a rubric's judge) are the engine's: the normal
workers run the turns, and teams.engine.evals scores what this module stopped."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from teams import services
from teams.conversation import pm_requests
from teams.errors import NotFound
from teams.evals import suites
from teams.evals.outcome import CheckResult, Outcome, read_folder
from teams.files import workspace
from teams.models import (
    APPROVE,
    EvalCase,
    EvalRun,
    Message,
    PMRequest,
    Team,
    TeamStatus,
    Turn,
)
from teams.run import team_actions

DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 32
# The check a stopped case gets before its suite's: why its team did not finish.
UNSCRIPTED, UNFINISHED = "pm_request", "finished"


@dataclass(frozen=True)
class RunSettings:
    repeat: int = 1
    overrides: tuple[str, ...] = ()
    concurrency: int = DEFAULT_CONCURRENCY
    source: str = "command"

    def as_dict(self) -> dict:
        return {
            "repeat": self.repeat,
            "set": list(self.overrides),
            "concurrency": self.concurrency,
            "source": self.source,
        }


def suite_of(run: EvalRun) -> suites.SuiteSpec:
    return suites.SuiteSpec.model_validate(run.suite)


@transaction.atomic
def eval_run_create(*, suite: suites.SuiteSpec, settings: RunSettings, user=None) -> EvalRun:
    """The run and a team per case and repeat (idle until advanced), in one
    transaction: a team that cannot be made leaves nothing behind."""
    if not 1 <= settings.repeat <= suites.MAX_REPEAT:
        raise suites.SuiteError(f"repeat is 1 to {suites.MAX_REPEAT}.", field="repeat")
    if not 1 <= settings.concurrency <= MAX_CONCURRENCY:
        raise suites.SuiteError(f"concurrency is 1 to {MAX_CONCURRENCY}.", field="concurrency")
    run = EvalRun.objects.create(
        suite_name=suite.name,
        suite=suite.model_dump(mode="json"),
        settings=settings.as_dict(),
        created_by=user,
    )
    template = suite.team.model_dump(exclude_none=True)
    agents = template.pop("agents")
    for own in ("name", "goal"):  # each case's team has its own
        template.pop(own, None)
    manager = None if user is None or user.is_superuser else user
    for spec in suite.cases:
        for repeat in range(1, settings.repeat + 1):
            team = services.team_create(
                **template,
                slug=f"eval-{run.pk}-{suites.case_slug(spec.name)}-{repeat}",
                name=f"Eval {run.pk} · {spec.name} #{repeat}",
                goal=spec.goal,
                agents=[{k: v for k, v in a.items() if v is not None} for a in agents],
                manager=manager,
            )
            EvalCase.objects.create(run=run, case=spec.name, repeat=repeat, team=team)
    return run


def eval_run_get(*, run_id: int) -> EvalRun:
    run = EvalRun.objects.filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"No eval run {run_id}.")
    return run


def eval_runs_visible_to(*, user):
    """The runs a person may read: a superuser all, anyone else the runs they started."""
    if user is None:
        return EvalRun.objects.none()
    runs = EvalRun.objects.all()
    return runs if user.is_superuser else runs.filter(created_by=user)


def eval_run_visible(*, run_id: int, user) -> EvalRun:
    """The run, when `user` may read it; NotFound otherwise (as for one that is not)."""
    run = eval_runs_visible_to(user=user).filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"No eval run {run_id}.")
    return run


# --- advancing ---------------------------------------------------------------------


def eval_run_advance(run: EvalRun, *, now=None) -> list[EvalCase]:
    """One step of the run: the cases whose teams stopped are marked so (and
    returned, to be scored), the PM's requests answered, queued cases started while
    fewer than the concurrency run."""
    now = now or timezone.now()
    suite = suite_of(run)
    specs = {c.name: c for c in suite.cases}
    stopped = []
    for case in run.cases.filter(status=EvalCase.Status.RUNNING).select_related("team"):
        if _step(case, specs[case.case], suite, now):
            stopped.append(case)
    running = run.cases.filter(status=EvalCase.Status.RUNNING).count()
    room = max(0, run.settings.get("concurrency", DEFAULT_CONCURRENCY) - running)
    for case in run.cases.filter(status=EvalCase.Status.QUEUED).select_related("team")[:room]:
        _start(case, specs[case.case], now)
    return stopped


def _start(case: EvalCase, spec: suites.CaseSpec, now) -> None:
    team = case.team
    if team is None:
        _stop(case, EvalCase.Status.STOPPED, "Its team was deleted before it started.", now)
        return
    for path, text in spec.files.items():  # guarded: a path may not leave the folder
        target = workspace.resolve(team, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    with transaction.atomic():
        EvalCase.objects.filter(pk=case.pk).update(status=EvalCase.Status.RUNNING, started_at=now)
        team_actions.team_start(team=team)
    case.status, case.started_at = EvalCase.Status.RUNNING, now


def _step(case: EvalCase, spec: suites.CaseSpec, suite: suites.SuiteSpec, now) -> bool:
    """Move one running case along; True when it stopped now."""
    team = case.team
    if team is None:
        return _stop(case, EvalCase.Status.STOPPED, "Its team was deleted.", now)
    team.refresh_from_db()
    if team.status == TeamStatus.DONE:
        return _stop(case, EvalCase.Status.DONE, "", now)
    request = PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).first()
    if request is not None:
        return _answer(case, spec, request, now)
    if team.status == TeamStatus.PAUSED:
        return _stop(case, EvalCase.Status.STOPPED, _pause_reason(team), now)
    started = case.started_at or now
    if now - started > timedelta(seconds=suite.case_timeout_seconds):
        if team.status == TeamStatus.RUNNING:
            team_actions.team_pause(team=team)
        why = f"Out of time: still at work after {suite.case_timeout_seconds} s."
        return _stop(case, EvalCase.Status.STOPPED, why, now)
    return False


def _answer(case: EvalCase, spec: suites.CaseSpec, request: PMRequest, now) -> bool:
    """Answer the PM's request from the script; a request it has no answer for stops
    the case with the question in its detail."""
    if request.kind == PMRequest.Kind.APPROVAL:
        pm_requests.pm_request_answer(request_id=request.pk, answer=APPROVE, changed_by="eval")
        return False
    if request.kind == PMRequest.Kind.QUESTION and case.answers_used < len(spec.pm_answers):
        answer = spec.pm_answers[case.answers_used]
        EvalCase.objects.filter(pk=case.pk).update(answers_used=F("answers_used") + 1)
        case.answers_used += 1
        pm_requests.pm_request_answer(request_id=request.pk, answer=answer, changed_by="eval")
        return False
    if request.kind == PMRequest.Kind.BUDGET:
        return _stop(case, EvalCase.Status.STOPPED, f"Budget reached: {request.question}", now)
    what = "the team asked for help" if request.kind == PMRequest.Kind.STUCK else "a question"
    used = len(spec.pm_answers)
    detail = (
        f"Unscripted PM request ({what}; the script's {used} answer{'s' * (used != 1)} "
        f"{'were' if used != 1 else 'was'} used): {request.question}"
    )
    return _stop(case, EvalCase.Status.STOPPED, detail, now, kind=UNSCRIPTED)


def _pause_reason(team: Team) -> str:
    failed = Turn.objects.filter(team=team, status=Turn.Status.FAILED).order_by("-id").first()
    if failed is not None and failed.error:
        return f"A turn failed and the team paused: {failed.error[:500]}"
    return "The team was paused before it finished."


def _stop(case: EvalCase, status: str, reason: str, now, *, kind: str = UNFINISHED) -> bool:
    """Mark the case stopped with its team's figures as they are now (claimed once: a
    case another process stopped first is left to it)."""
    team = case.team
    figures = _figures(team) if team is not None else {}
    changed = EvalCase.objects.filter(pk=case.pk, status=EvalCase.Status.RUNNING).update(
        status=status,
        stop_reason=f"{kind}\n{reason}" if reason else "",
        finished_at=now,
        seconds=(now - (case.started_at or now)).total_seconds(),
        **figures,
    )
    return bool(changed)


def _figures(team: Team) -> dict:
    team.refresh_from_db(fields=["turn_count", "spent_usd"])
    tokens = Turn.objects.filter(team=team).aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    return {
        "turns": team.turn_count,
        "cost_usd": team.spent_usd,
        "input_tokens": tokens["i"] or 0,
        "output_tokens": tokens["o"] or 0,
    }


def eval_run_finish_if_done(run: EvalRun) -> bool:
    """The run is done when every case is scored."""
    if run.cases.filter(scored_at__isnull=True).exists():
        return False
    EvalRun.objects.filter(pk=run.pk, status=EvalRun.Status.RUNNING).update(
        status=EvalRun.Status.DONE, finished_at=timezone.now()
    )
    run.refresh_from_db()
    return True


# --- scoring's inputs and results ---------------------------------------------------


def stop_check(case: EvalCase) -> CheckResult | None:
    """The check a stopped case fails before its suite's: why its team did not finish."""
    if case.status != EvalCase.Status.STOPPED:
        return None
    kind, _, reason = case.stop_reason.partition("\n")
    return CheckResult(kind or UNFINISHED, False, reason or "The team stopped before it finished.")


def outcome_of(case: EvalCase, *, goal: str) -> Outcome:
    """What the case's team left (its files read now), for the checks."""
    team = case.team
    if team is None:
        return Outcome(goal, "", {}, "", case.turns, case.cost_usd)
    root = workspace.workspace_root(team)
    summary = (
        Message.objects.filter(team=team, kind=Message.Kind.PHASE_SUMMARY)
        .order_by("-id")
        .values_list("content", flat=True)
        .first()
    )
    return Outcome(
        goal=goal,
        summary=summary or "",
        files=read_folder(root),
        folder=str(root),
        turns=case.turns,
        cost_usd=Decimal(case.cost_usd),
    )


def eval_case_claim_scoring(case: EvalCase) -> bool:
    """Claim a stopped case's scoring (once, whichever process gets there first)."""
    return bool(
        EvalCase.objects.filter(pk=case.pk, scored_at__isnull=True)
        .exclude(status__in=(EvalCase.Status.QUEUED, EvalCase.Status.RUNNING))
        .update(scored_at=timezone.now())
    )


@transaction.atomic
def eval_case_record(*, case: EvalCase, results: list[CheckResult]) -> EvalCase:
    """The case's check results; it passes when every one passes."""
    first = stop_check(case)
    checks = ([first] if first else []) + list(results)
    case.checks = [c.as_dict() for c in checks]
    case.passed = bool(checks) and all(c.passed for c in checks)
    case.scored_at = case.scored_at or timezone.now()
    case.save(update_fields=["checks", "passed", "scored_at"])
    return case
