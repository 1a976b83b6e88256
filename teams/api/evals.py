"""Eval runs: start one (a suite as JSON; 202, the workers and the sweeper run it) and
follow it (its report)."""

from ninja import Router, Status

from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.evals import EvalRunCreatedOut, EvalRunIn, EvalRunOut
from teams.engine import evals
from teams.evals import report, runs, suites

router = Router(tags=["evals"])


@router.post(
    "/evals", response=responses({202: EvalRunCreatedOut}, 400), operation_id="evals_create"
)
def evals_create(request, payload: EvalRunIn):
    """Run a suite: a team per case and repeat, made at once (nothing when the suite
    cannot run: a 422 naming the field), run by the normal workers, the PM's requests
    answered from the script and the checks applied by the sweeper. Follow it with GET
    /api/evals/{id}. An account token or a staff session that may create teams."""
    who = caller(request)
    who.require_team_creator()
    suite = payload.suite
    if payload.set:
        data = suites.overrides_apply(suite.model_dump(mode="json"), payload.set)
        suite = suites.suite_parse(data, source="suite")
    settings = runs.RunSettings(
        repeat=payload.repeat,
        overrides=tuple(payload.set),
        concurrency=payload.concurrency,
        source="api",
    )
    run = evals.eval_run_start(suite=suite, settings=settings, user=who.user)
    return Status(202, EvalRunCreatedOut(id=run.pk, status=run.status, cases=run.cases.count()))


@router.get("/evals/{run_id}", response=responses({200: EvalRunOut}, 404), operation_id="evals_get")
def evals_get(request, run_id: int):
    """A run's report: each case's team, status, checks, turns, cost and time."""
    who = caller(request)
    run = runs.eval_run_visible(run_id=run_id, user=who.user)
    return EvalRunOut(**report.run_report(run), status=run.status)
