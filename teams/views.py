"""The PM's pages: the team list, a team's live view (with its consultations), its
workspace (the files its agents wrote, and each file's text) and the PM inbox.

Plain forms that work without JavaScript; the pages' script adds live updates
over the WebSockets. Every page is for staff, and shows only the teams the user
manages (superusers see all); another team's page is a 404."""

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from teams import conversation, drift, lifecycle, mesh, pm_requests, selectors, workspace
from teams.catalog import OFFLINE_MODEL
from teams.engine.providers import model_problem
from teams.errors import LoomError
from teams.models import Agent, PMRequest
from tools.mesh import recommendation

NOT_SET = "(not set)"


def _team_or_404(request, slug):
    team = selectors.team_for_user(user=request.user, slug=slug)
    if team is None:
        raise Http404("No such team.")
    return team


def agent_drift(agent: Agent) -> dict:
    """What the PM sees of an agent's drift (the live view, its script and the admin):
    the score as check_drift computes it, what it means, the hierarchy, the chain
    breaks and the advice."""
    value = drift.score(agent)
    breaks = drift.chain_breaks(agent)
    meaning = drift.meaning(value)
    return {
        "agent": agent.name,
        "role": agent.role,
        "score": value,
        "meaning": meaning,
        "band": meaning.replace(" ", "-"),
        "flagged": value < drift.SIGNIFICANT,
        "hierarchy": [[level, getattr(agent, level) or NOT_SET] for level in mesh.LEVELS],
        "breaks": breaks,
        "recommendation": recommendation(value, breaks),
    }


@staff_member_required
def team_list(request):
    teams = list(
        selectors.teams_visible_to(user=request.user).order_by("slug").prefetch_related("agents")
    )
    for team in teams:
        team.drifting = [d for d in map(agent_drift, team.agents.all()) if d["flagged"]]
    open_requests = selectors.open_pm_requests_for(user=request.user).count()
    return render(request, "teams/team_list.html", {"teams": teams, "open_requests": open_requests})


@staff_member_required
def team_live(request, slug):
    team = _team_or_404(request, slug)
    transcript = selectors.team_transcript(team=team)
    agents = list(team.agents.all())
    return render(
        request,
        "teams/team_live.html",
        {
            "team": team,
            "conversation": transcript,
            "older_count": selectors.team_conversation(team=team).count() - len(transcript),
            "pm_request": selectors.team_open_pm_request(team=team),
            "actions": lifecycle.pm_actions(team.status),
            "all_actions": [(a.value, a.label) for a in lifecycle.PM_ACTIONS],
            "agents": agents,
            "queries": selectors.team_recent_queries(team=team),
            "offline": any(a.effective_model == OFFLINE_MODEL for a in agents),
            "model_problems": _model_problems(agents),
            "drift": [agent_drift(a) for a in agents],
            "workspace_files": team.workspace_files.count(),
            "consultation_batches": selectors.team_recent_consultations(team=team),
            "live_config": {
                "ws": f"/ws/teams/{team.slug}/",
                "answer_url": reverse("pm-answer", args=[0]),
                "drift_url": reverse("team-drift", args=[team.slug]),
                "drift_bands": drift.bands(),
                "drift_flag_below": drift.SIGNIFICANT,
                "next": reverse("team-live", args=[team.slug]),
                "csrf": get_token(request),
            },
        },
    )


def _bytes(size: int | None) -> str:
    return "1 byte" if size == 1 else f"{size or 0:,} bytes"


def _workspace_refused(request, team, path: str, error: LoomError):
    """A refused or missing path: the domain's message on a 4xx page, nothing read."""
    status = error.status if 400 <= error.status < 500 else 400
    return render(
        request,
        "teams/workspace_refused.html",
        {"team": team, "path": path, "message": error.message},
        status=status,
    )


def _crumbs(path: str) -> list[tuple[str, str]]:
    """(name, path) of each folder on the way to `path`, the top first."""
    parts = path.split("/") if path else []
    return [(name, "/".join(parts[: i + 1])) for i, name in enumerate(parts)]


@staff_member_required
def team_files(request, slug):
    """A folder of the team's workspace: each entry, its size, and for files who wrote
    it last and in which turn."""
    team = _team_or_404(request, slug)
    path = request.GET.get("path", "")
    try:
        listing, entries = workspace.folder_entries(team, path)
    except LoomError as exc:
        return _workspace_refused(request, team, path, exc)
    rows = [
        {"entry": e, "size": _bytes(e.size) if e.kind == "file" else "", **written}
        for e, written in entries
    ]
    parent = listing.path.rpartition("/")[0] if listing.path else None
    return render(
        request,
        "teams/workspace.html",
        {
            "team": team,
            "listing": listing,
            "rows": rows,
            "crumbs": _crumbs(listing.path),
            "parent": parent,
            "hidden_count": listing.total - len(listing),
        },
    )


@staff_member_required
def team_file(request, slug):
    """A file of the team's workspace: its text (the first 100 KB) escaped in a <pre>,
    or that it is binary, with who wrote it last and in which turn."""
    team = _team_or_404(request, slug)
    path = request.GET.get("path", "")
    try:
        found = workspace.file_read(team, path)
    except LoomError as exc:
        return _workspace_refused(request, team, path, exc)
    folder = found.path.rpartition("/")[0]
    return render(
        request,
        "teams/workspace_file.html",
        {
            "team": team,
            "file": found,
            "size": _bytes(found.size),
            "limit_kb": workspace.MAX_READ_BYTES // 1024,
            "crumbs": _crumbs(folder),
            "folder": folder,
            "name": found.path.rpartition("/")[2],
            **workspace.file_written(team, found.path),
        },
    )


@staff_member_required
def team_drift(request, slug):
    """The live view's drift panel as JSON: its script asks after each finished turn."""
    team = _team_or_404(request, slug)
    return JsonResponse({"agents": [agent_drift(a) for a in team.agents.all()]})


@staff_member_required
@require_POST
def team_action(request, slug):
    team = _team_or_404(request, slug)
    name = request.POST.get("action", "")
    if name not in lifecycle.PM_ACTIONS:
        messages.error(request, "Unknown action.")
        return redirect("team-live", slug=team.slug)
    try:
        conversation.PM_ACTION_SERVICES[name](team=team)
    except LoomError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Team {team.slug} {PAST_TENSE[name]}.")
    return redirect("team-live", slug=team.slug)


PAST_TENSE = {"start": "started", "pause": "paused", "resume": "resumed"}


@staff_member_required
@require_POST
def team_post(request, slug):
    team = _team_or_404(request, slug)
    try:
        pm_requests.pm_message_post(
            team=team, content=request.POST.get("content", ""), user=request.user
        )
    except LoomError as exc:
        messages.error(request, exc.message)
    return redirect("team-live", slug=team.slug)


@staff_member_required
def pm_inbox(request):
    return render(
        request,
        "teams/pm_inbox.html",
        {
            "requests": selectors.open_pm_requests_for(user=request.user),
            "inbox_config": {
                "ws": "/ws/pm/",
                "answer_url": reverse("pm-answer", args=[0]),
                "team_url": reverse("team-live", args=["SLUG"]),
                "csrf": get_token(request),
            },
        },
    )


@staff_member_required
@require_POST
def pm_answer(request, request_id):
    pm_request = (
        PMRequest.objects.filter(
            pk=request_id, team__in=selectors.teams_visible_to(user=request.user)
        )
        .select_related("team")
        .first()
    )
    if pm_request is None:
        raise Http404("No such PM request.")
    try:
        pm_requests.pm_request_answer(
            request_id=pm_request.id,
            answer=request.POST.get("answer", ""),
            user=request.user,
            pin_as=request.POST.get("pin_as", ""),
        )
    except LoomError as exc:
        messages.error(request, f"{pm_request.team.slug}: {exc.message}")
    else:
        messages.success(request, f"Answer sent; team {pm_request.team.slug} resumes.")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        target = reverse("pm-inbox")
    return redirect(target)


def _model_problems(agents) -> list[str]:
    """Agents whose model cannot be called now, said before their turn fails."""
    problems: dict[str, list[str]] = {}
    for agent in agents:
        problem = model_problem(agent.effective_model)
        if problem:
            problems.setdefault(problem, []).append(agent.name)
    return [f"{', '.join(names)}: {problem}." for problem, names in problems.items()]
