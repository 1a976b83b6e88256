"""A run as its JSON report (the `--json` file, GET /api/evals/{id}, the pages' data)
and as the table `manage.py eval run` prints. The report's keys are a contract:
{"suite", "run", "settings", "cases": [{"case", "repeat", "team", "status", "passed",
"checks": [{"kind", "passed", "detail"}], "turns", "cost_usd", "seconds"}], "summary":
{"passed", "total", "cost_usd", "turns"}}."""

from __future__ import annotations

from decimal import Decimal

from teams.models import EvalCase, EvalRun


def case_report(case: EvalCase) -> dict:
    return {
        "case": case.case,
        "repeat": case.repeat,
        "team": case.team.slug if case.team_id else None,
        "status": case.status,
        "passed": case.passed,
        "checks": list(case.checks),
        "turns": case.turns,
        "cost_usd": float(case.cost_usd),
        "seconds": round(case.seconds, 1),
    }


def run_report(run: EvalRun) -> dict:
    cases = list(run.cases.select_related("team").order_by("id"))
    return {
        "suite": run.suite_name,
        "run": run.pk,
        "settings": dict(run.settings),
        "cases": [case_report(case) for case in cases],
        "summary": {
            "passed": sum(1 for case in cases if case.passed),
            "total": len(cases),
            "cost_usd": float(sum((case.cost_usd for case in cases), Decimal(0))),
            "turns": sum(case.turns for case in cases),
        },
    }


def failed_checks(case: dict) -> str:
    """The kinds of the case's failed checks, e.g. "file_exists, rubric"."""
    return ", ".join(check["kind"] for check in case["checks"] if not check["passed"])


def verdict_word(passed: bool | None) -> str:
    return {True: "yes", False: "NO", None: "-"}[passed]


def table(report: dict) -> str:
    """The report as the command prints it: a row per case and repeat, then the total."""
    rows = [("case", "passed", "checks failed", "turns", "cost", "time")]
    for case in report["cases"]:
        rows.append(
            (
                f"{case['case']} #{case['repeat']}",
                verdict_word(case["passed"]),
                failed_checks(case) or "-",
                str(case["turns"]),
                f"${case['cost_usd']:.4f}",
                f"{case['seconds']:.1f}s",
            )
        )
    summary = report["summary"]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"{summary['passed']}/{summary['total']} passed, {summary['turns']} turns, "
        f"${summary['cost_usd']:.4f} (run {report['run']}, suite {report['suite']})"
    )
    return "\n".join(lines)


def progress_line(run: EvalRun) -> str:
    """One line on a run under way: cases scored, running, passed; turns; cost."""
    cases = list(run.cases.select_related("team"))
    scored = [c for c in cases if c.scored_at is not None]
    running = [c for c in cases if c.status == EvalCase.Status.RUNNING]
    turns = sum(c.team.turn_count for c in cases if c.team_id)
    cost = sum((c.team.spent_usd for c in cases if c.team_id), Decimal(0))
    passed = sum(1 for c in scored if c.passed)
    return (
        f"[{len(scored)}/{len(cases)} done] {len(running)} running, {passed} passed, "
        f"{len(scored) - passed} failed · {turns} turns · ${cost:.4f}"
    )
