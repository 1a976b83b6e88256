"""The PM's pages: the team list, a team's live view (with its consultations), its
workspace (the files its agents wrote, and each file's text) and the PM inbox.

Plain forms that work without JavaScript; the pages' script adds live updates
over the WebSockets. Every page is for staff, and shows only the teams the user
manages (superusers see all); another team's page is a 404."""

import json

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from teams import selectors
from teams.conversation import pm_requests
from teams.engine.providers import model_problem
from teams.errors import InvalidInput, LoomError
from teams.files import workspace
from teams.history import cloning, team_state
from teams.lib.catalog import OFFLINE_MODEL
from teams.models import (
    APPROVAL_CHOICES,
    BUDGET_CHOICES,
    HUMAN_TEXT_LIMIT,
    STUCK_CHOICES,
    Message,
    PMRequest,
    Team,
)
from teams.run import drift, drift_alerts, lifecycle, steering, team_actions
from teams.web import working_notes
from teams.web.presentation import (
    AGENT_BUDGET_WARNING,
    BUDGET_WARNING,
    BUDGET_WARNING_SHARE,
    NOT_SET,
    agent_budget_warnings,
    agent_drift,
    budgets,
    model_label,
    shortened,
    size_in_bytes,
    turn_figures,
)

# The statuses the head of the live view offers "Run again" in: not while the team
# runs, and a done team offers it in its end box.
RUN_AGAIN_HEAD = (Team.Status.IDLE, Team.Status.PAUSED)
# The characters of a consultation's ask the panel shows (the whole ask is its title).
CONSULT_PROMPT_SHOWN = 300


def _team_or_404(request, slug):
    team = selectors.team_for_user(user=request.user, slug=slug)
    if team is None:
        raise Http404("No such team.")
    return team


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
        team.actions = lifecycle.pm_actions(team.status)
    return render(
        request,
        "teams/team_list.html",
        {
            "teams": teams,
            "open_requests": sum(open_by_team.values()),
            "all_actions": [(a.value, a.label) for a in lifecycle.PM_ACTIONS],
            "list_config": {
                "ws": "/ws/pm/",
                "actions": {status: lifecycle.pm_actions(status) for status in Team.Status},
                "budget_warning_share": BUDGET_WARNING_SHARE,
            },
        },
    )


@staff_member_required
def team_live(request, slug):
    team = _team_or_404(request, slug)
    transcript = selectors.team_transcript(team=team)
    agents = list(team.agents.all())
    for agent in agents:  # the roster says each agent's model and endpoint
        agent.model_label = model_label(agent.effective_model)
    # A turn with several messages shows its figures once, on its last message.
    last_of_turn = {m.turn_id: m.id for m in transcript if m.turn_id}
    recent_files = selectors.team_recent_files(team=team)
    for row in recent_files:
        row.size_text = size_in_bytes(row.size)
    anchors = list(team.anchors.order_by("key"))  # the template asks each its source_text
    # A turn's working notes go under its first message (teams.web.working_notes).
    notes = working_notes.notes_by_turn(transcript)
    first_of_turn = working_notes.first_of_turn(transcript)
    conversation_rows = [
        (
            m,
            turn_figures(m.turn) if m.turn_id and last_of_turn[m.turn_id] == m.id else None,
            notes.get(m.turn_id, "") if m.turn_id and first_of_turn[m.turn_id] == m.id else "",
        )
        for m in transcript
    ]
    return render(
        request,
        "teams/team_live.html",
        {
            "team": team,
            "conversation": conversation_rows,
            "budgets": budgets(team),
            "agent_budget_warnings": agent_budget_warnings(agents),
            "post_limit": HUMAN_TEXT_LIMIT,
            "older_count": transcript[0].number - 1 if transcript else 0,
            "pm_request": selectors.team_open_pm_request(team=team),
            "budget_choices": BUDGET_CHOICES,
            "approval_choices": APPROVAL_CHOICES,
            "stuck_choices": STUCK_CHOICES,
            "actions": lifecycle.pm_actions(team.status),
            "all_actions": [(a.value, a.label) for a in lifecycle.PM_ACTIONS],
            "agents": agents,
            "queries": selectors.team_recent_queries(team=team),
            "offline": any(a.effective_model == OFFLINE_MODEL for a in agents),
            "model_problems": _model_problems(agents),
            "drift": [agent_drift(a) for a in agents],
            "workspace_files": team.workspace_files.count(),
            "consultation_batches": _consultation_batches(team),
            "anchors": anchors,
            "keepers": selectors.team_recent_keepers(team=team),
            "recent_files": recent_files,
            "outcome": {"phases": list(team.phases)},
            "fork_left_out": "; ".join(team_state.left_out("fork")),
            "run_again_statuses": RUN_AGAIN_HEAD,
            "live_config": {
                "ws": f"/ws/teams/{team.slug}/",
                # The team's event number as of this page (read before its contents).
                "seq": team.event_seq,
                "answer_url": reverse("pm-answer", args=[0]),
                "drift_url": reverse("team-drift", args=[team.slug]),
                "drift_bands": drift.bands(),
                "drift_flag_below": drift.SIGNIFICANT,
                "next": reverse("team-live", args=[team.slug]),
                "csrf": get_token(request),
                "post_limit": HUMAN_TEXT_LIMIT,
                "budget_warning": BUDGET_WARNING,
                "agent_budget_warning": AGENT_BUDGET_WARNING,
                "budget_warning_share": BUDGET_WARNING_SHARE,
                "file_url": reverse("team-file", args=[team.slug]),
                "turn_url": reverse("admin:teams_turn_change", args=[0]),
                "notes_url": reverse("team-turn-notes", args=[team.slug, 0]),
                "status": team.status,
                "run_again_statuses": RUN_AGAIN_HEAD,
                "first_number": transcript[0].number if transcript else 1,
                "fork_name": cloning.copy_name(team.name, "fork of message {n}"),
                "not_set": NOT_SET,
                "phases": list(team.phases),
                "recent_files": selectors.RECENT_FILES,
                "recent_keepers": selectors.RECENT_KEEPERS,
                "recent_batches": selectors.RECENT_BATCHES,
                "consult_prompt_shown": CONSULT_PROMPT_SHOWN,
            },
        },
    )


def _consultation_batches(team) -> list[dict]:
    """The latest asks, each prompt shortened as the panel shows it (never mid-word)."""
    batches = selectors.team_recent_consultations(team=team)
    for batch in batches:
        batch["prompt_shown"] = shortened(batch["prompt"], CONSULT_PROMPT_SHOWN)
    return batches


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
        {"entry": e, "size": size_in_bytes(e.size) if e.kind == "file" else "", **written}
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
            "size": size_in_bytes(found.size),
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
def team_turn_notes(request, slug, turn_id):
    """A finished turn's working notes as JSON: the live view's script asks when a
    turn that wrote beside its tool calls finishes (the stream is not kept)."""
    team = _team_or_404(request, slug)
    shown = list(Message.objects.filter(team=team, turn_id=turn_id).filter(selectors.SHOWN))
    notes = working_notes.notes_by_turn(shown).get(turn_id, "")
    return JsonResponse({"turn": turn_id, "notes": notes})


@staff_member_required
@require_POST
def team_action(request, slug):
    team = _team_or_404(request, slug)
    name = request.POST.get("action", "")
    if name not in lifecycle.PM_ACTIONS:
        messages.error(request, "Unknown action.")
        return redirect("team-live", slug=team.slug)
    try:
        report = team_actions.team_pm_action(team=team, action=lifecycle.TeamAction(name))
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


STEERED = {
    "next_speaker": "{agent} speaks next; the rotation resumes after.",
    "nudge": "Nudge sent: {agent} reads it on its next turn, and nobody else does.",
    "seat": "Posted as {agent}'s turn, marked as yours; the rotation goes on.",
}


@staff_member_required
@require_POST
def team_steer(request, slug):
    """The roster's steering forms (teams.run.steering): the next speaker, a nudge, a seat."""
    team = _team_or_404(request, slug)
    op = request.POST.get("op", "")
    if op not in STEERED:
        messages.error(request, "Unknown steering action.")
        return redirect("team-live", slug=team.slug)
    try:
        agent = selectors.agent_get(team=team, name=request.POST.get("agent", ""))
        if op == "next_speaker":
            steering.team_next_speaker_set(team=team, agent=agent, user=request.user)
        elif op == "nudge":
            text = request.POST.get("nudge_text", "")
            steering.agent_nudge(agent=agent, text=text, user=request.user)
        else:
            text = request.POST.get("seat_text", "")
            steering.agent_seat_take(agent=agent, text=text, user=request.user)
    except LoomError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, STEERED[op].format(agent=agent.name))
    return redirect("team-live", slug=team.slug)


@staff_member_required
@require_POST
def team_run_again(request, slug):
    """Run the team again: a fresh idle copy (teams.history.cloning) under the next free slug;
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


def _budget_warnings(team) -> list[str]:
    """The team's budget warning lines, then its agents' own."""
    agents = team.agents.filter(cost_warned_at__isnull=False)
    return budgets(team)["warnings"] + [line for _, line in agent_budget_warnings(agents)]


@staff_member_required
def pm_inbox(request):
    return render(
        request,
        "teams/pm_inbox.html",
        {
            "requests": selectors.open_pm_requests_for(user=request.user),
            "budget_choices": BUDGET_CHOICES,
            "stuck_choices": STUCK_CHOICES,
            "approval_choices": APPROVAL_CHOICES,
            # 80% of a budget used (teams.run.budgets): said here until the budget is raised.
            "budget_warnings": [
                (team, warnings)
                for team in selectors.budget_warned_teams(user=request.user)
                if (warnings := _budget_warnings(team))
            ],
            # Agents in significant drift two turns running (teams.run.drift_alerts).
            "drift_alerts": drift_alerts.drifting(
                selectors.teams_visible_to(user=request.user).exclude(status="done")
            ),
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
            note=request.POST.get("note", ""),
            arguments=_edited_arguments(pm_request, request.POST.get("arguments", "")),
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


def _edited_arguments(pm_request: PMRequest, text: str) -> dict | None:
    """An approval form's arguments box: None when left as it was (or empty), the
    edited object otherwise; not JSON is refused with the reason."""
    if not text.strip():
        return None
    try:
        edited = json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"The edited arguments are not JSON: {exc.msg}."
        raise InvalidInput(problem, field="arguments") from None
    return None if edited == pm_request.arguments else edited


def _model_problems(agents) -> list[str]:
    """Agents whose model cannot be called now, said before their turn fails."""
    problems: dict[str, list[str]] = {}
    for agent in agents:
        problem = model_problem(agent.effective_model)
        if problem:
            problems.setdefault(problem, []).append(agent.name)
    return [f"{', '.join(names)}: {problem}." for problem, names in problems.items()]
