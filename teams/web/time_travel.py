"""The PM's pages for time travel: fork from a message of the live view, a file's
revisions, and two teams compared."""

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from teams.errors import LoomError
from teams.files import revisions, workspace
from teams.history import cloning, comparing, forking
from teams.web.presentation import size_in_bytes
from teams.web.views import _crumbs, _team_or_404, _workspace_refused


@staff_member_required
@require_POST
def team_fork(request, slug):
    """Fork the team at a message ("Fork from here"): a new idle team under the next
    free slug, and the PM lands on its live page to change what they want first."""
    team = _team_or_404(request, slug)
    try:
        at_message = int(request.POST.get("at_message", ""))
    except ValueError:
        messages.error(request, "Choose a message to fork at.")
        return redirect("team-live", slug=team.slug)
    try:
        fork = forking.team_fork(
            team=team,
            slug=cloning.next_free_slug(team.slug),
            at_message=at_message,
            user=request.user,
        )
    except LoomError as exc:
        messages.error(request, exc.message)
        return redirect("team-live", slug=team.slug)
    messages.success(request, f"{forking.made_message(fork)} Change what you want, then start it.")
    return redirect("team-live", slug=fork.slug)


@staff_member_required
def team_file_history(request, slug):
    """A file's revisions, newest first, and the text of the one chosen (the newest
    by default)."""
    team = _team_or_404(request, slug)
    path = request.GET.get("path", "")
    try:
        rel = workspace.relative(team, path)
        history = revisions.file_history(team, rel)
        number = int(request.GET.get("revision") or history[0].number)
        shown = revisions.revision_get(team, rel, number)
    except ValueError:
        return _workspace_refused(request, team, path, LoomError("A revision is a number, from 1."))
    except LoomError as exc:
        return _workspace_refused(request, team, path, exc)
    return render(
        request,
        "teams/workspace_history.html",
        {
            "team": team,
            "path": rel,
            "crumbs": _crumbs(rel.rpartition("/")[0]),
            "rows": [
                {**revisions.revision_out(r), "size_text": size_in_bytes(r.blob.size)}
                for r in history
            ],
            "shown": shown,
            "limit_kb": revisions.MAX_SHOWN_BYTES // 1024,
        },
    )


@staff_member_required
def team_compare(request, slug, other):
    """Two teams side by side: turns, cost, phases, PM requests, files, and the first
    point where their conversations differ."""
    a, b = _team_or_404(request, slug), _team_or_404(request, other)
    compared = comparing.team_compare(a=a, b=b)
    return render(
        request,
        "teams/compare.html",
        {
            "a": a,
            "b": b,
            "a_summary": compared["a"],
            "b_summary": compared["b"],
            "first_difference": compared["first_difference"],
        },
    )
