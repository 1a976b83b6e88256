"""Compare two teams' runs (an original and its fork or replay, or any two teams):
turns, cost, phases reached, PM requests, files written, and the first point where
their conversations differ."""

from __future__ import annotations

from teams.history import forking
from teams.models import Message, PMRequest, Team, Turn, WorkspaceFile

SHOWN_CHARS = 300


def _said(message: Message | None) -> dict | None:
    if message is None:
        return None
    text = message.content
    return {
        "id": message.pk,
        "speaker": message.speaker,
        "kind": message.kind,
        "phase": message.phase,
        "content": text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…",
    }


def team_summary(team: Team) -> dict:
    reached = team.phases[: team.phase_index + 1]
    return {
        "slug": team.slug,
        "status": team.status,
        "forked_from": team.forked_from.slug if team.forked_from_id else None,
        "forked_at": team.forked_at,
        "turns": team.turn_count,
        "turns_run": Turn.objects.filter(team=team).count(),
        "spent_usd": f"{team.spent_usd + team.copied_spent_usd:.6f}",
        **{
            k: (f"{v:.6f}" if not isinstance(v, int) else v)
            for k, v in forking.fork_counters(team).items()
        },
        "phases_reached": reached,
        "done": team.status == Team.Status.DONE,
        "pm_requests": [
            {
                "kind": r.kind,
                "question": r.question[:SHOWN_CHARS],
                "status": r.status,
                "answer": r.answer[:SHOWN_CHARS],
            }
            for r in PMRequest.objects.filter(team=team).order_by("id")
        ],
        "files_written": [
            {"path": f.path, "size": f.size, "writes": f.writes}
            for f in WorkspaceFile.objects.filter(team=team).order_by("path")
        ],
    }


def _key(message: Message) -> tuple:
    return (
        message.author.name if message.author_id else message.author_label,
        message.kind,
        message.content,
    )


def first_difference(a: Team, b: Team) -> dict | None:
    """The first position where the two conversations (no inboxes) differ: who spoke,
    the kind or the words; None when they are the same."""
    mine = (
        Message.objects.filter(team=a, recipient__isnull=True)
        .select_related("author")
        .order_by("id")
    )
    theirs = (
        Message.objects.filter(team=b, recipient__isnull=True)
        .select_related("author")
        .order_by("id")
    )
    left, right = iter(mine.iterator(chunk_size=500)), iter(theirs.iterator(chunk_size=500))
    position = 0
    while True:
        x, y = next(left, None), next(right, None)
        if x is None and y is None:
            return None
        if x is None or y is None or _key(x) != _key(y):
            return {"position": position, "a": _said(x), "b": _said(y)}
        position += 1


def team_compare(*, a: Team, b: Team) -> dict:
    return {"a": team_summary(a), "b": team_summary(b), "first_difference": first_difference(a, b)}
