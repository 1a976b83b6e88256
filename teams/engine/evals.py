"""Eval runs, the engine's part: starting one (its models checked first), the judge's
calls, scoring the cases teams.evals.runs stopped, and rescoring a stored run.

The judge is any model id a provider serves (teams.engine.providers): its request is
checked against the run's judge budget (the suite's judge_max_cost_usd) and refused
for a model with no price before it is made, and each call is priced and recorded as
a ModelCall (purpose eval_judge) on the case's team. The teams' turns run on the
normal workers; the sweeper advances the runs nobody drives (advance_all), and
`manage.py eval run` drives its own (teams.engine.eval_driver)."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import transaction
from django.db.models import F

from teams.engine.providers import model_problem, provider_for
from teams.errors import ModelError
from teams.evals import judge, runs, suites
from teams.evals.outcome import Judge, Outcome, ToScore
from teams.lib import catalog
from teams.models import EvalCase, EvalRun, ModelCall
from teams.run import budgets, usage

log = logging.getLogger("loom.evals")


def suite_problems(suite: suites.SuiteSpec) -> None:
    """A SuiteError naming the first model that cannot be called (an agent's, or a
    rubric's judge), before anything is created."""
    for index, agent in enumerate(suite.team.agents):
        model = agent.model or catalog.default_model()
        problem = model_problem(model)
        if problem:
            raise suites.SuiteError(
                f"team.agents[{index}].model: {problem}", field=f"team.agents[{index}].model"
            )
    judge_problems(suite)


def judge_problems(suite: suites.SuiteSpec) -> None:
    """A SuiteError naming the first rubric check whose judge cannot be asked."""
    for c, case in enumerate(suite.cases):
        for k, check in enumerate(case.checks):
            if suites.check_kind(check) != "rubric":
                continue
            where = f"cases[{c}].checks[{k}].model"
            model = check.model or suite.judge
            if not model:
                raise suites.SuiteError(
                    f"{where}: a rubric check needs a judge: give it a model, or the suite "
                    "a `judge`.",
                    field=where,
                )
            problem = judge_problem(model)
            if problem:
                raise suites.SuiteError(f"{where}: {problem}", field=where)


def judge_problem(model: str) -> str:
    if model == catalog.OFFLINE_MODEL:
        return f"the offline model ({catalog.OFFLINE_MODEL}) cannot judge a rubric"
    return model_problem(model)


def eval_run_start(*, suite: suites.SuiteSpec, settings: runs.RunSettings, user=None) -> EvalRun:
    """Check the suite's models, create the run and start its first cases."""
    suite_problems(suite)
    run = runs.eval_run_create(suite=suite, settings=settings, user=user)
    runs.eval_run_advance(run)
    return run


# --- the judge ---------------------------------------------------------------------


@dataclass
class JudgeCall:
    key: str
    model: str
    usage: catalog.Usage
    reply: str


@dataclass
class Purse:
    """The run's judge budget, shared by the checks scoring at once."""

    remaining: Decimal
    calls: list[JudgeCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reserve(self, amount: Decimal) -> bool:
        with self.lock:
            if amount > self.remaining:
                return False
            self.remaining -= amount
            return True

    def settle(self, reserved: Decimal, call: JudgeCall) -> None:
        with self.lock:
            self.remaining += reserved - catalog.cost_of(call.model, call.usage)
            self.calls.append(call)


def judge_for(purse: Purse, keys: dict[int, str]) -> Judge:
    """The Judge the rubric checks call: one budgeted, priced request per check."""

    def ask(rubric: str, model: str, outcome: Outcome) -> judge.Verdict:
        problem = judge_problem(model)
        if problem:
            raise ModelError(problem)
        request = judge.judge_request(
            rubric=rubric, goal=outcome.goal, summary=outcome.summary, files=outcome.files
        )
        estimate = budgets.call_estimate(
            model=model,
            system=request.system,
            messages=request.messages,
            tools=request.tools,
            max_tokens=judge.JUDGE_MAX_TOKENS,
        )
        if not purse.reserve(estimate):
            raise ModelError(
                f"the judge's call (up to ${estimate:.4f}) would cross the run's judge "
                f"budget (${purse.remaining:.4f} left); it was not made"
            )
        try:
            reply = provider_for(model, purpose="eval_judge").respond(
                model=model,
                system=request.system,
                messages=request.messages,
                tools=request.tools,
                max_tokens=judge.JUDGE_MAX_TOKENS,
            )
        except BaseException:
            purse.settle(estimate, JudgeCall(keys[id(outcome)], model, catalog.Usage(), ""))
            raise
        said = json.dumps(reply.content)[:10_000]
        purse.settle(
            estimate, JudgeCall(keys[id(outcome)], reply.model or model, reply.usage, said)
        )
        verdict = judge.verdict_of(reply.content)
        if verdict is None:
            raise ModelError("the judge's reply gave no verdict")
        verdict.model, verdict.usage = reply.model or model, reply.usage
        return verdict

    return ask


# --- scoring -----------------------------------------------------------------------


def _key(case: EvalCase) -> str:
    return f"{case.case}#{case.repeat}"


def score_cases(
    run: EvalRun, cases: list[EvalCase], *, suite: suites.SuiteSpec | None = None, fresh=False
):
    """Apply the suite's checks to the cases (stopped ones), record the results and
    the judge's calls; the run is done once every case is scored. The judges may
    spend the suite's judge budget less what this run's spent already (all of it
    again on a `fresh` pass, a rescore)."""
    suite = suite or runs.suite_of(run)
    specs = {c.name: c for c in suite.cases}
    # As stored now: the figures and stop reason were written by an UPDATE.
    cases = list(
        EvalCase.objects.filter(pk__in=[c.pk for c in cases]).select_related("team").order_by("id")
    )
    catalog.price_table()  # read now, in this thread: the checks' threads reuse it
    to_score, keys = [], {}
    for case in cases:
        outcome = runs.outcome_of(case, goal=specs[case.case].goal)
        keys[id(outcome)] = _key(case)
        to_score.append(ToScore(_key(case), outcome, specs[case.case].checks))
    run.refresh_from_db(fields=["judge_spent_usd"])
    spent = Decimal(0) if fresh else run.judge_spent_usd
    purse = Purse(remaining=max(Decimal(0), suite.judge_max_cost_usd - spent))
    concurrency = run.settings.get("concurrency", runs.DEFAULT_CONCURRENCY)
    # pydantic-evals (and pydantic-ai under it: about a second of imports) loads only in
    # a process that scores: the API, the pages and the workers import this module.
    from teams.evals import checks

    results = checks.score(
        to_score,
        judge=judge_for(purse, keys),
        default_judge=suite.judge,
        concurrency=concurrency,
    )
    by_key = {_key(c): c for c in cases}
    with transaction.atomic():
        for key, found in results.items():
            runs.eval_case_record(case=by_key[key], results=found)
        _record_judge_calls(run, by_key, purse.calls)
    runs.eval_run_finish_if_done(run)


def _record_judge_calls(run: EvalRun, by_key: dict[str, EvalCase], calls: list[JudgeCall]):
    spent = Decimal(0)
    for call in calls:
        team = by_key[call.key].team
        cost = catalog.cost_of(call.model, call.usage)
        spent += cost
        if team is not None:
            usage.model_call_record(
                team=team,
                model=call.model,
                usage=call.usage,
                purpose=ModelCall.Purpose.EVAL_JUDGE,
                reply=call.reply,
            )
    if spent:
        EvalRun.objects.filter(pk=run.pk).update(judge_spent_usd=F("judge_spent_usd") + spent)


def eval_run_step(run: EvalRun) -> int:
    """Advance the run once and score the cases that stopped; how many were scored."""
    stopped = runs.eval_run_advance(run)
    claimed = [case for case in stopped if runs.eval_case_claim_scoring(case)]
    if claimed:
        score_cases(run, claimed)
    return len(claimed)


def advance_all() -> int:
    """The sweeper's pass: step every running run started through the API (a
    command's run is stepped by the command). The number of cases scored (what the
    sweeper's log reports: nothing while the teams are only at work)."""
    scored = 0
    for run in EvalRun.objects.filter(status=EvalRun.Status.RUNNING):
        if run.settings.get("source") != "api":
            continue
        try:
            scored += eval_run_step(run)
        except Exception:
            log.exception("Eval run %s could not advance", run.pk)
    return scored


def eval_run_rescore(run: EvalRun, *, suite: suites.SuiteSpec | None = None) -> EvalRun:
    """Apply the checks again (the run's own, or a new suite's) to its stopped cases,
    with no model call for the teams (a rubric check still asks its judge). A new
    suite's checks replace the stored suite's for the cases it names."""
    stored = runs.suite_of(run)
    if suite is not None:
        given = {c.name: c for c in suite.cases}
        cases = [given.get(c.name, c) for c in stored.cases]
        stored = stored.model_copy(
            update={
                "cases": cases,
                "judge": suite.judge or stored.judge,
                "judge_max_cost_usd": suite.judge_max_cost_usd,
            }
        )
        judge_problems(stored)
        EvalRun.objects.filter(pk=run.pk).update(suite=stored.model_dump(mode="json"))
        run.refresh_from_db()
    finished = list(
        run.cases.exclude(
            status__in=(EvalCase.Status.QUEUED, EvalCase.Status.RUNNING)
        ).select_related("team")
    )
    score_cases(run, finished, suite=stored, fresh=True)
    run.refresh_from_db()
    return run
