"""Two runs side by side: per case and in total, the pass rate, turns, tokens and
cost of each, and the cases whose verdict changed (`manage.py eval compare` and the
page /evals/{id}/compare/{other})."""

from __future__ import annotations

from decimal import Decimal

from teams.models import EvalCase, EvalRun


def _side(cases: list[EvalCase]) -> dict | None:
    if not cases:
        return None
    passed = sum(1 for c in cases if c.passed)
    return {
        "passed": passed,
        "total": len(cases),
        "pass_rate": round(passed / len(cases), 3),
        "turns": sum(c.turns for c in cases),
        "tokens": sum(c.tokens for c in cases),
        "cost_usd": float(sum((c.cost_usd for c in cases), Decimal(0))),
    }


def verdict(side: dict | None) -> str:
    """ "passed" (every repeat), "failed" (none), "mixed", or "absent"."""
    if side is None:
        return "absent"
    if side["passed"] == side["total"]:
        return "passed"
    return "failed" if side["passed"] == 0 else "mixed"


def runs_compare(a: EvalRun, b: EvalRun) -> dict:
    """{"a", "b", "cases": [{"case", "a", "b", "verdict_a", "verdict_b", "changed"}],
    "total": {"a", "b"}, "changed": [case names]}: each side's figures as _side's."""
    by_case: dict[str, tuple[list, list]] = {}
    for side, run in enumerate((a, b)):
        for case in run.cases.order_by("id"):
            by_case.setdefault(case.case, ([], []))[side].append(case)
    rows = []
    for name, (left, right) in by_case.items():
        sa, sb = _side(left), _side(right)
        va, vb = verdict(sa), verdict(sb)
        rows.append(
            {"case": name, "a": sa, "b": sb, "verdict_a": va, "verdict_b": vb, "changed": va != vb}
        )
    return {
        "a": {"run": a.pk, "suite": a.suite_name, "settings": a.settings},
        "b": {"run": b.pk, "suite": b.suite_name, "settings": b.settings},
        "cases": rows,
        "total": {"a": _side(list(a.cases.all())), "b": _side(list(b.cases.all()))},
        "changed": [row["case"] for row in rows if row["changed"]],
    }


def _cells(side: dict | None) -> list[str]:
    if side is None:
        return ["-", "-", "-", "-"]
    return [
        f"{side['passed']}/{side['total']}",
        str(side["turns"]),
        str(side["tokens"]),
        f"${side['cost_usd']:.4f}",
    ]


def compare_table(comparison: dict) -> str:
    """The comparison as `manage.py eval compare` prints it."""
    a, b = comparison["a"]["run"], comparison["b"]["run"]
    head = ["case"] + [
        f"{what} {run}" for run in (a, b) for what in ("pass", "turns", "tokens", "cost")
    ]
    rows = [head + ["verdict"]]
    for row in comparison["cases"]:
        change = f"{row['verdict_a']} -> {row['verdict_b']}" if row["changed"] else "same"
        rows.append([row["case"], *_cells(row["a"]), *_cells(row["b"]), change])
    total = comparison["total"]
    rows.append(["total", *_cells(total["a"]), *_cells(total["b"]), ""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) + 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    changed = comparison["changed"]
    lines.append(
        f"Changed verdict: {', '.join(changed)}" if changed else "No case changed verdict."
    )
    return "\n".join(lines)
