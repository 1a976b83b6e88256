"""Time travel: fork a team at a point, replay its recorded run, compare two teams,
and read a workspace file's revisions."""

from ninja import Query, Router, Status

from teams.api.auth import caller
from teams.api.paging import MAX_NUMBER
from teams.api.schemas.common import responses
from teams.api.schemas.forks import (
    CompareOut,
    FileHistoryOut,
    ForkIn,
    ForkOut,
    ReplayIn,
    ReplayOut,
    RevisionOut,
    RevisionTextOut,
)
from teams.api.workspace import PATH_HELP, query_path
from teams.engine import replay
from teams.files import revisions, workspace
from teams.history import comparing, forking
from teams.integrations import mcp_servers

router = Router(tags=["time travel"])


def fork_out(fork) -> ForkOut:
    return ForkOut(
        slug=fork.slug,
        name=fork.name,
        forked_from=fork.forked_from.slug if fork.forked_from else "",
        forked_at=fork.forked_at,
        status=fork.status,
        phase=fork.phase,
        messages=fork.messages.count(),
        copied_turns=fork.copied_turns,
        copied_spent_usd=f"{fork.copied_spent_usd:.6f}",
        spent_usd=f"{fork.spent_usd:.6f}",
        mcp_servers_without_variables=mcp_servers.mcp_servers_stripped(
            source=fork.forked_from, copy=fork
        ),
    )


@router.post(
    "/teams/{team}/fork",
    response=responses({201: ForkOut}, 400, 404, 409),
    operation_id="teams_fork",
)
def teams_fork(request, team: str, payload: ForkIn):
    """A new idle team holding this team's state as of a message (`at_message`) or a
    turn's end (`at_turn`), with the edits applied: the conversation, phase and
    summaries, queries, keepers, anchors, plan, files at their revision then, agents.
    A point inside an unfinished turn moves back to the last finished turn. For a
    person who manages the team (not a team token). A missing point is a 404; another
    team's point, or an invalid edit, a 422; a taken slug a 409. Nothing of the
    original changes."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("fork the team")
    who.require_person("fork the team")
    edits = forking.Edits(
        goal=payload.goal, plan=payload.plan, anchors=payload.anchors, message=payload.message
    )
    fork = forking.team_fork(
        team=row,
        slug=payload.slug,
        name=payload.name,
        at_message=payload.at_message,
        at_turn=payload.at_turn,
        edits=edits,
        user=who.user,
    )
    return Status(201, fork_out(fork))


@router.post(
    "/teams/{team}/replay",
    response=responses({201: ReplayOut}, 400, 404, 409),
    operation_id="teams_replay",
)
def teams_replay(request, team: str, payload: ReplayIn):
    """Replay the team's recorded run as a new team, in this request: Loom builds the
    prompts and runs the tools, every model call is answered from the record (0
    tokens). It stops at the first model call whose request differs from the
    original's (the report names the turn and the agent, with a diff), or at
    `until_turn`. For a person who manages the team. A team with no turn is a 422, a
    taken slug a 409."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("replay the team")
    who.require_person("replay the team")
    result = replay.team_replay(
        team=row, slug=payload.slug, until_turn=payload.until_turn, user=who.user
    )
    return Status(201, replay_out(result))


def replay_out(row) -> ReplayOut:
    return ReplayOut(
        source=row.source_slug,
        team=row.team.slug,
        status=row.status,
        turns_replayed=row.turns_replayed,
        model_steps=row.model_steps,
        diverged_turn=row.diverged_turn,
        diverged_agent=row.diverged_agent,
        reason=row.reason,
        diff=row.diff,
    )


@router.get(
    "/teams/{team}/compare/{other}",
    response=responses({200: CompareOut}, 404),
    operation_id="teams_compare",
)
def teams_compare(request, team: str, other: str):
    """Two teams side by side (both must be the caller's): turns, cost (copied and
    own), phases reached, PM requests, files written, and the first point where
    their conversations differ (null when they do not)."""
    who = caller(request)
    return comparing.team_compare(a=who.team(team), b=who.team(other))


@router.get(
    "/teams/{team}/files/history",
    response=responses({200: FileHistoryOut}, 404),
    operation_id="files_history",
)
def files_history(request, team: str, path: str = Query("", description=PATH_HELP)):
    """A workspace file's revisions, newest first: number, content hash, size, who
    wrote it and in which turn. A hostile path is a 422, a file never written a 404."""
    row = caller(request).team(team)
    with query_path():
        rel = workspace.relative(row, path)
    history = revisions.file_history(row, rel)
    return FileHistoryOut(
        path=rel, revisions=[RevisionOut(**revisions.revision_out(r)) for r in history]
    )


@router.get(
    "/teams/{team}/files/revision",
    response=responses({200: RevisionTextOut}, 404),
    operation_id="files_revision",
)
def files_revision(
    request,
    team: str,
    path: str = Query("", description=PATH_HELP),
    number: int = Query(..., ge=1, le=MAX_NUMBER, description="The revision's number, from 1."),
):
    """One revision of a workspace file with its text (the first 100 KB)."""
    row = caller(request).team(team)
    with query_path():
        rel = workspace.relative(row, path)
    found = revisions.revision_get(row, rel, number)
    return RevisionTextOut(
        path=rel,
        text=found.text,
        truncated=found.truncated,
        **revisions.revision_out(found.revision),
    )
