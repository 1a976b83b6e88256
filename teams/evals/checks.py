"""The checks, as pydantic-evals Evaluators, and scoring finished cases with them.
(Only scoring imports pydantic-evals: what the pages, the API and the runs need of a
case's outcome is in teams.evals.outcome.)

A case's team, once stopped, is read into an `Outcome` (its files, summary, turns,
cost: read here, in the caller's thread, so no evaluator touches the database). The
cases are scored together by one pydantic-evals Dataset: each case's task returns its
outcome, each check is an Evaluator returning {"<index>:<kind>": EvaluationReason}, and
an evaluator that raises is an evaluator failure, recorded as a failed check saying
what went wrong. Command checks run in the run_command sandbox on a copy of the final
workspace with the check's own files added; rubric checks ask the `Judge` the engine
gives (teams.engine.evals)."""

from __future__ import annotations

import asyncio
import functools
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import anyio
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext

from teams.errors import LoomError
from teams.evals import suites
from teams.evals.outcome import CheckResult, Judge, Outcome, ToScore
from teams.files import sandbox

DETAIL_CHARS = 2000

def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= DETAIL_CHARS else "…" + text[-DETAIL_CHARS:]


@dataclass
class _Check(Evaluator):
    index: int

    kind = ""

    def result(self, passed: bool, detail: str) -> dict:
        return {f"{self.index}:{self.kind}": EvaluationReason(value=passed, reason=detail)}

    def evaluate(self, ctx: EvaluatorContext) -> dict:  # each kind has its own
        raise NotImplementedError


@dataclass
class FileExists(_Check):
    path: str = ""
    kind = "file_exists"

    def evaluate(self, ctx: EvaluatorContext) -> dict:
        outcome: Outcome = ctx.output
        there = self.path in outcome.files or (Path(outcome.folder) / self.path).is_file()
        return self.result(there, f"{self.path} {'exists' if there else 'does not exist'}")


@dataclass
class FileContains(_Check):
    path: str = ""
    pattern: str = ""
    kind = "file_contains"

    def evaluate(self, ctx: EvaluatorContext) -> dict:
        text = ctx.output.files.get(self.path)
        if text is None:
            return self.result(False, f"{self.path} does not exist (or is not text)")
        found = re.search(self.pattern, text, re.MULTILINE)
        said = "contains" if found else "does not contain"
        return self.result(bool(found), f"{self.path} {said} /{self.pattern}/")


@dataclass
class MaxTurns(_Check):
    limit: int = 0
    kind = "max_turns"

    def evaluate(self, ctx: EvaluatorContext) -> dict:
        turns = ctx.output.turns
        return self.result(turns <= self.limit, f"{turns} turns (at most {self.limit})")


@dataclass
class MaxCost(_Check):
    limit: Decimal = Decimal(0)
    kind = "max_cost_usd"

    def evaluate(self, ctx: EvaluatorContext) -> dict:
        cost = ctx.output.cost_usd
        return self.result(cost <= self.limit, f"${cost:.4f} (at most ${self.limit:.4f})")


@dataclass
class _Slow(_Check):
    """A check that waits (a command, a judge): run in a thread so the cases' slow
    checks overlap."""

    async def evaluate_async(self, ctx: EvaluatorContext):
        return await anyio.to_thread.run_sync(self.evaluate, ctx)


@dataclass
class Command(_Slow):
    command: str = ""
    files: dict[str, str] = field(default_factory=dict)
    timeout_seconds: int = 60
    kind = "command"

    def evaluate(self, ctx: EvaluatorContext) -> dict:
        with tempfile.TemporaryDirectory(prefix="loom-eval-") as scratch:
            copy = Path(scratch) / "workspace"
            shutil.copytree(ctx.output.folder, copy, symlinks=True)
            for path, text in self.files.items():  # the hidden files, for this check only
                target = copy / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            try:
                ran = sandbox.sandbox_run(
                    directory=copy, command=self.command, timeout_seconds=self.timeout_seconds
                )
            except LoomError as exc:  # no sandbox here, or none free for a whole timeout
                return self.result(False, f"Error: {exc.message}")
        output = "\n".join(part for part in (ran.stdout.strip(), ran.stderr.strip()) if part)
        return self.result(ran.ok, f"{ran.status()}\n{_short(output)}".strip())


@dataclass
class Rubric(_Slow):
    rubric: str = ""
    model: str = ""
    judge: Judge | None = None
    kind = "rubric"

    def evaluate(self, ctx: EvaluatorContext) -> dict:
        verdict = self.judge(self.rubric, self.model, ctx.output)
        said = "passed" if verdict.passed else "failed"
        who = f" ({verdict.model})" if verdict.model else ""
        return self.result(verdict.passed, f"The judge{who} {said}: {verdict.reasons}")


def evaluators_for(checks: list, *, judge: Judge, default_judge: str) -> list[_Check]:
    """The suite's checks of one case as Evaluators, in order."""
    made: list[_Check] = []
    for index, check in enumerate(checks):
        kind = suites.check_kind(check)
        if kind == "command":
            made.append(Command(index, check.command, dict(check.files), check.timeout_seconds))
        elif kind == "file_exists":
            made.append(FileExists(index, check.file_exists))
        elif kind == "file_contains":
            made.append(FileContains(index, check.file_contains.path, check.file_contains.pattern))
        elif kind == "max_turns":
            made.append(MaxTurns(index, check.max_turns))
        elif kind == "max_cost_usd":
            made.append(MaxCost(index, check.max_cost_usd))
        else:
            made.append(Rubric(index, check.rubric, check.model or default_judge, judge))
    return made


def _evaluate(dataset: Dataset, task, concurrency: int):
    """The dataset's report, from a thread of its own when this one runs an event loop
    already (nothing the evaluators do needs this thread: they read no database)."""
    run = functools.partial(
        dataset.evaluate, task, name="loom-eval", max_concurrency=concurrency, progress=False
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return dataset.evaluate_sync(
            task, name="loom-eval", max_concurrency=concurrency, progress=False
        )
    with ThreadPoolExecutor(1, "loom-eval-score") as pool:
        return pool.submit(lambda: asyncio.run(run())).result()


def score(
    cases: list[ToScore], *, judge: Judge, default_judge: str, concurrency: int = 4
) -> dict[str, list[CheckResult]]:
    """Each case's check results, in its suite's order."""
    if not cases:
        return {}
    outcomes = {c.key: c.outcome for c in cases}
    made = {
        c.key: evaluators_for(c.checks, judge=judge, default_judge=default_judge) for c in cases
    }
    dataset = Dataset(
        name="loom-eval",
        cases=[Case(name=c.key, inputs=c.key, evaluators=made[c.key]) for c in cases],
    )
    report = _evaluate(dataset, outcomes.__getitem__, concurrency)
    results: dict[str, list[CheckResult]] = {}
    for row in report.cases:
        found: dict[int, CheckResult] = {}
        for name, result in row.assertions.items():
            index, _, kind = name.partition(":")
            found[int(index)] = CheckResult(kind, bool(result.value), result.reason or "")
        for failure in row.evaluator_failures:
            check = next((e for e in made[row.name] if e.as_spec() == failure.source), None)
            if check is not None:
                detail = f"Error: the check could not be made: {failure.error_message}"
                found[check.index] = CheckResult(check.kind, False, detail)
        results[row.name] = [found[i] for i in sorted(found)]
    for failure in report.failures:  # the task itself failed: no check could run
        results[failure.name] = [
            CheckResult(e.kind, False, f"Error: {failure.error_message}")
            for e in made[failure.name]
        ]
    return results
