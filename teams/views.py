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

from teams import (
    cloning,
    conversation,
    drift,
    lifecycle,
    mesh,
    pm_requests,
    selectors,
    workspace,
)
from teams.catalog import OFFLINE_MODEL
from teams.drift import recommendation
from teams.engine.providers import model_problem
from teams.errors import LoomError
from teams.models import BUDGET_CHOICES, HUMAN_TEXT_LIMIT, Agent, PMRequest

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


# From this share of a budget on, the PM's pages warn (the team pauses at the budget).
BUDGET_WARNING_SHARE = 0.8
BUDGET_WARNING = (
    "⚠ {percent}% of the {budget} budget used ({used} of {limit}); "
    "the team pauses when it is reached."
)


def budgets(team) -> dict:
    """The team's turns and cost against its budgets, with a warning line per budget
    from BUDGET_WARNING_SHARE on (the live view's script words them the same way)."""
    warnings, warned = [], set()
    for budget, used, limit, shown in (
        ("turn", team.turn_count, team.max_turns, "{:,}"),
        ("cost", team.spent_usd, team.max_cost_usd, "${:,.2f}"),
    ):
        if limit and float(used) >= float(limit) * BUDGET_WARNING_SHARE:
            warned.add(budget)
            warnings.append(
                BUDGET_WARNING.format(
                    percent=int(100 * used / limit),
                    budget=budget,
                    used=shown.format(used),
                    limit=shown.format(limit),
                )
            )
    return {
        "spent": f"{team.spent_usd:.6f}",
        "turns_high": team.max_turns * BUDGET_WARNING_SHARE,
        "cost_high": f"{float(team.max_cost_usd) * BUDGET_WARNING_SHARE:.6f}",
        "warnings": warnings,
        "turns_warn": "turn" in warned,
        "cost_warn": "cost" in warned,
    }


def turn_figures(turn) -> dict | None:
    """A turn's tokens, cost and duration: a short line, and the detail on hover
    (the live view's script builds the same from the turn.finished event)."""
    if turn is None or turn.status not in (turn.Status.DONE, turn.Status.FAILED):
        return None
    tokens = (
        turn.input_tokens + turn.output_tokens + turn.cache_creation_tokens + turn.cache_read_tokens
    )
    seconds = None
    if turn.started_at and turn.finished_at:
        seconds = (turn.finished_at - turn.started_at).total_seconds()
    line = f"{tokens:,} tokens · ${turn.cost_usd:.4f}"
    title = (
        f"Turn {turn.number}, {turn.model or 'no model call'}: {turn.input_tokens:,} input, "
        f"{turn.cache_read_tokens:,} read from cache, {turn.cache_creation_tokens:,} written "
        f"to cache, {turn.output_tokens:,} output tokens; ${turn.cost_usd:.6f}"
    )
    if seconds is not None:
        line += f" · {seconds:.1f} s"
        title += f"; {seconds:.2f} s"
    return {"line": line, "title": title}


@staff_member_required
def team_list(request):
    teams = list(
        selectors.teams_visible_to(user=request.user).order_by("slug").prefetch_related("agents")
    )
    open_by_team: dict[int, int] = {}
    for team_id in selectors.open_pm_requests_for(user=request.user).values_list(
        "team_id", flat=True
    ):
        open_by_team[team_id] = open_by_team.get(team_id, 0) + 1
    for team in teams:
        team.drifting = [d for d in map(agent_drift, team.agents.all()) if d["flagged"]]
        team.open_requests = open_by_team.get(team.id, 0)
        team.budgets = budgets(team)
    return render(
        request,
        "teams/team_list.html",
        {
            "teams": teams,
            "open_requests": sum(open_by_team.values()),
            "list_config": {
                "ws": "/ws/pm/",
                "budget_warning_share": BUDGET_WARNING_SHARE,
            },
        },
    )


@staff_member_required
def team_live(request, slug):
    team = _team_or_404(request, slug)
    transcript = selectors.team_transcript(team=team)
    agents = list(team.agents.all())
    # A turn with several messages shows its figures once, on its last message.
    last_of_turn = {m.turn_id: m.id for m in transcript if m.turn_id}
    conversation_rows = [
        (m, turn_figures(m.turn) if m.turn_id and last_of_turn[m.turn_id] == m.id else None)
        for m in transcript
    ]
    return render(
        request,
        "teams/team_live.html",
        {
            "team": team,
            "conversation": conversation_rows,
            "budgets": budgets(team),
            "post_limit": HUMAN_TEXT_LIMIT,
            "older_count": selectors.team_conversation(team=team).count() - len(transcript),
            "pm_request": selectors.team_open_pm_request(team=team),
            "budget_choices": BUDGET_CHOICES,
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
                "post_limit": HUMAN_TEXT_LIMIT,
                "budget_warning": BUDGET_WARNING,
                "budget_warning_share": BUDGET_WARNING_SHARE,
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
        report = conversation.team_pm_action(team=team, action=lifecycle.TeamAction(name))
    except LoomError as exc:
        messages.error(request, exc.message)
    else:
        (messages.warning if report.stopped else messages.success)(request, report.text)
    return redirect("team-live", slug=team.slug)


@staff_member_required
@require_POST
def team_post(request, slug):
    """The PM speaks to the team. The page's script posts with `Accept:
    application/json` and shows the answer in place; a plain form post reloads."""
    team = _team_or_404(request, slug)
    wants_json = request.headers.get("Accept") == "application/json"
    try:
        message = pm_requests.pm_message_post(
            team=team, content=request.POST.get("content", ""), user=request.user
        )
    except LoomError as exc:
        if wants_json:
            return JsonResponse({"detail": exc.message}, status=exc.status)
        messages.error(request, exc.message)
        return redirect("team-live", slug=team.slug)
    done = "Posted; the next agent to speak reads it."
    if wants_json:
        return JsonResponse({"id": message.id, "detail": done}, status=201)
    messages.success(request, done)
    return redirect("team-live", slug=team.slug)


@staff_member_required
@require_POST
def team_run_again(request, slug):
    """Run the team again: a fresh idle copy (teams.cloning) under the next free slug;
    the PM lands on its live page, ready to start it. Whoever manages the team may:
    the copy has the same managers (and no more rights than the team had)."""
    team = _team_or_404(request, slug)
    try:
        clone = cloning.team_clone(
            team=team, slug=cloning.next_free_slug(team.slug), user=request.user
        )
    except LoomError as exc:
        messages.error(request, exc.message)
        return redirect("team-live", slug=team.slug)
    messages.success(
        request, f"{cloning.made_message(team=clone, source=team)} Start it when ready."
    )
    return redirect("team-live", slug=clone.slug)


@staff_member_required
def pm_inbox(request):
    return render(
        request,
        "teams/pm_inbox.html",
        {
            "requests": selectors.open_pm_requests_for(user=request.user),
            "budget_choices": BUDGET_CHOICES,
            # 80% of a budget used (teams.budgets): said here until the budget is raised.
            "budget_warnings": [
                (team, budgets(team)["warnings"])
                for team in selectors.budget_warned_teams(user=request.user)
                if budgets(team)["warnings"]
            ],
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
            # A quick choice (a budget request's button) comes after the text box.
            answer=next((a for a in reversed(request.POST.getlist("answer")) if a.strip()), ""),
            user=request.user,
            pin_as=request.POST.get("pin_as", ""),
        )
    except LoomError as exc:
        messages.error(request, f"{pm_request.team.slug}: {exc.message}")
    else:
        pm_request.refresh_from_db()
        pm_request.team.refresh_from_db()
        resumes = pm_request.team.status != pm_request.team.Status.PAUSED
        said = "resumes" if resumes else "stays paused"
        messages.success(request, f"Answer sent; team {pm_request.team.slug} {said}.")
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
