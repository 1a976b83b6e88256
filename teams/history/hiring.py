"""Hired runs: a team published over A2A (`Team.a2a`) is a template other agents hire.

Each hire is a fresh copy of the template, as "Run again" makes it
(teams.history.cloning), with the hirer's text as its goal and its files in the
workspace, started at once; it is an ordinary team (the admin, the live view, budgets
and metrics see it) that says which template and which token hired it.

What the hirer sees of a run (`hire_state`) is read from the team every time (the
database is the truth, so a restart loses nothing): running -> working; waiting for
the PM -> input-required with the PM request's text; done -> completed with the
final summary; paused by the hirer's cancel -> canceled; paused otherwise (a failed
turn) -> failed with the reason. A hirer's message on a run answers its open PM
request exactly as the PM's inbox would (teams.conversation.pm_requests)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db import models, transaction
from django.utils import timezone

from teams.conversation import pm_requests
from teams.errors import Conflict, InvalidInput, NotFound
from teams.files import workspace
from teams.history import cloning
from teams.models import Message, PMRequest, Team, Turn
from teams.run import team_actions

MAX_FILES = 50
MAX_FILE_CHARS = 200_000
# The artifacts a finished run hands back: its workspace's text files, this many at most.
MAX_ARTIFACTS = 200


class HireState(models.TextChoices):
    WORKING = "working", "Working"
    INPUT_REQUIRED = "input-required", "Input required"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


@dataclass(frozen=True)
class RunState:
    """A run as its hirer sees it: the state and the words that go with it."""

    state: HireState
    text: str


def hire_start(*, template: Team, goal: str, files: dict[str, str], label: str) -> Team:
    """Copy the published `template` into a new run with `goal`, write `files` into
    its workspace, and start it. Refused (nothing made) when the template is not
    published, the goal is empty or a file is refused."""
    if not template.a2a:
        raise NotFound(f"No team {template.slug!r} is published over A2A.")
    if not goal.strip():
        raise InvalidInput("The message has no text: its text is the run's goal.", field="goal")
    if len(files) > MAX_FILES:
        raise InvalidInput(f"At most {MAX_FILES} files a message.", field="files")
    for path, text in files.items():
        if len(text) > MAX_FILE_CHARS:
            raise InvalidInput(f"{path}: over {MAX_FILE_CHARS:,} characters.", field="files")
    run = cloning.team_clone(team=template, slug=cloning.next_free_slug(template.slug))
    try:
        for path, text in files.items():
            target = workspace.resolve(run, path)  # refuses a path that leaves the folder
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        with transaction.atomic():
            Team.objects.filter(pk=run.pk).update(
                goal=goal, hired_from=template, hired_by=label[:120]
            )
            run.refresh_from_db()
            team_actions.team_start(team=run)
    except Exception:
        run.delete()  # a refused file or start leaves no half-made run behind
        raise
    run.refresh_from_db()
    return run


def hired_runs(*, template: Team):
    return Team.objects.filter(hired_from=template).order_by("-created_at", "-id")


def hired_run(*, template: Team, slug: str) -> Team:
    run = hired_runs(template=template).filter(slug=slug).first()
    if run is None:
        raise NotFound(f"No task {slug!r} of team {template.slug!r}.")
    return run


def hire_answer(*, run: Team, text: str, user=None) -> PMRequest:
    """The hirer's message on a run that waits for input answers its open request."""
    request = PMRequest.objects.filter(team=run, status=PMRequest.Status.OPEN).first()
    if request is None:
        state = hire_state(run).state.label.lower()
        raise Conflict(f"Task {run.slug!r} is not waiting for input (it is {state}).")
    return pm_requests.pm_request_answer(
        request_id=request.pk, answer=text, user=user, changed_by="a2a"
    )


def hire_cancel(*, run: Team) -> Team:
    """Cancel a run: it pauses (a PM may resume it), and its hirer sees it canceled."""
    if run.status not in (Team.Status.RUNNING, Team.Status.AWAITING_PM):
        state = hire_state(run).state.label.lower()
        raise Conflict(f"Task {run.slug!r} is {state}: nothing to cancel.")
    with transaction.atomic():
        team_actions.team_pause(team=run)
        Team.objects.filter(pk=run.pk).update(hire_canceled_at=timezone.now())
    run.refresh_from_db()
    return run


def hire_state(run: Team) -> RunState:
    if run.status == Team.Status.DONE:
        return RunState(HireState.COMPLETED, final_summary(run))
    request = PMRequest.objects.filter(team=run, status=PMRequest.Status.OPEN).first()
    if request is not None and run.status != Team.Status.PAUSED:
        return RunState(HireState.INPUT_REQUIRED, request_text(request))
    if run.status == Team.Status.PAUSED:
        if run.hire_canceled_at is not None:
            return RunState(HireState.CANCELED, "Canceled by the hirer: the run is paused.")
        return RunState(HireState.FAILED, _pause_reason(run))
    return RunState(HireState.WORKING, f"The team is at work in phase {run.phase!r}.")


def request_text(request: PMRequest) -> str:
    """A PM request as the hirer reads it: the question, an approval with its arguments."""
    who = f"{request.agent.name} asks" if request.agent_id else "The team asks"
    if request.kind == PMRequest.Kind.APPROVAL:
        arguments = json.dumps(request.arguments or {}, indent=2, ensure_ascii=False)
        return (
            f"{who} to run the tool {request.tool_name} with these arguments:\n{arguments}\n"
            f"{request.question}\nAnswer Approve or Deny (with a note, if you like)."
        )
    return f"{who}: {request.question}"


def final_summary(run: Team) -> str:
    last = Message.objects.filter(team=run, kind=Message.Kind.PHASE_SUMMARY).order_by("-id").first()
    return last.content if last is not None else f"Team {run.slug!r} finished its work."


def _pause_reason(run: Team) -> str:
    failed = Turn.objects.filter(team=run, status=Turn.Status.FAILED).order_by("-id").first()
    if failed is not None and failed.error:
        return f"A turn failed and the run paused: {failed.error[:500]}"
    why = Message.objects.filter(team=run, kind=Message.Kind.SYSTEM).order_by("-id").first()
    return why.content if why is not None else "The run was paused before it finished."


def hire_files(run: Team) -> list[tuple[str, str]]:
    """The run's workspace text files (path, text), for its artifacts."""
    out: list[tuple[str, str]] = []
    root = workspace.workspace_root(run)
    if not root.is_dir():
        return out
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("."):
            continue
        try:
            text = path.read_text(encoding="utf-8")[:MAX_FILE_CHARS]
        except (UnicodeDecodeError, OSError):
            continue
        out.append((rel, text))
        if len(out) >= MAX_ARTIFACTS:
            break
    return out
