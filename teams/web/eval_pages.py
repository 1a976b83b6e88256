"""The eval pages: the runs (/evals/), one run with its cases, their teams and the
failing checks' detail (/evals/{id}/), and two runs side by side
(/evals/{id}/compare/{other}). For staff; a person sees the runs they started (a
superuser, every run), any other is a 404."""

from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404
from django.shortcuts import redirect, render

from teams.errors import NotFound
from teams.evals import compare, report, runs

RUNS_SHOWN = 100


def _run_or_404(request, run_id: int):
    try:
        return runs.eval_run_visible(run_id=run_id, user=request.user)
    except NotFound as exc:
        raise Http404(exc.message) from None


@staff_member_required
def eval_list(request):
    """The runs, newest first, with their pass counts and cost."""
    visible = runs.eval_runs_visible_to(user=request.user)[:RUNS_SHOWN]
    rows = [{"run": run, "report": report.run_report(run)} for run in visible]
    return render(request, "teams/evals/eval_list.html", {"rows": rows})


@staff_member_required
def eval_run(request, run_id: int):
    """One run: each case and repeat, its team, its checks (the failing ones' detail)."""
    run = _run_or_404(request, run_id)
    others = runs.eval_runs_visible_to(user=request.user).exclude(pk=run.pk)
    if request.GET.get("compare", "").isdigit():
        return redirect("eval-compare", run_id=run.pk, other=int(request.GET["compare"]))
    return render(
        request,
        "teams/evals/eval_run.html",
        {
            "run": run,
            "report": report.run_report(run),
            "others": others.filter(suite_name=run.suite_name)[:20] or others[:20],
        },
    )


@staff_member_required
def eval_compare(request, run_id: int, other: int):
    """Two runs side by side: per case and in total, pass rate, turns, tokens, cost,
    and the cases whose verdict changed."""
    a, b = _run_or_404(request, run_id), _run_or_404(request, other)
    return render(
        request,
        "teams/evals/eval_compare.html",
        {"a": a, "b": b, "comparison": compare.runs_compare(a, b)},
    )
