"""File revisions: every workspace write keeps the content it wrote, with the agent
and the turn that wrote it, so a file's history and any earlier text can be read, and
a fork (teams.history.forking) gets each file as it was at the point it forks from.

Content is addressed by its SHA-256 (FileBlob): the same bytes written twice, by one
team or by several (a fork shares its original's blobs), are stored once; a revision
row (FileRevision) names the blob, the path, who wrote it, in which turn, and its
number (1, 2, ... per path). Writing a file with the content it already has still
makes a revision (a write happened), pointing at the same blob.

Limits: a revision holds what one write may (teams.files.workspace.MAX_WRITE_BYTES, 200 KB);
a file keeps its newest MAX_REVISIONS_PER_FILE (200) revisions, older ones are dropped
(their numbers are not reused); a revision's text is shown up to MAX_READ_BYTES
(100 KB), like the file itself. Blobs no revision uses any more are removed when a
team is deleted. Paths are the workspace's resolved paths: nothing here resolves a
path against the disk, so a revision is found by the path its write recorded."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Max

from teams.errors import NotFound
from teams.models import Agent, FileBlob, FileRevision, Team, Turn

MAX_REVISIONS_PER_FILE = 200
MAX_SHOWN_BYTES = 100 * 1024


def blob_store(data: bytes) -> FileBlob:
    """The blob holding `data`, made when no blob has these bytes yet."""
    digest = hashlib.sha256(data).hexdigest()
    blob, _ = FileBlob.objects.get_or_create(
        sha256=digest, defaults={"size": len(data), "content": data}
    )
    return blob


@transaction.atomic
def revision_add(
    *,
    team: Team,
    path: str,
    data: bytes,
    agent: Agent | None = None,
    turn: Turn | None = None,
    note: str = "",
    blob: FileBlob | None = None,
    deleted: bool = False,
) -> FileRevision:
    """Record one write of `path` (its resolved path in the workspace), or its deletion
    (`deleted`, with empty content)."""
    blob = blob or blob_store(data)
    rows = FileRevision.objects.filter(team=team, path=path)
    number = (rows.aggregate(n=Max("number"))["n"] or 0) + 1
    revision = FileRevision.objects.create(
        team=team,
        path=path,
        blob=blob,
        agent=agent,
        turn=turn,
        number=number,
        note=note[:160],
        deleted=deleted,
    )
    stale = rows.order_by("-number").values_list("pk", flat=True)[MAX_REVISIONS_PER_FILE:]
    if stale:
        FileRevision.objects.filter(pk__in=list(stale)).delete()
    return revision


@dataclass(frozen=True)
class RevisionText:
    revision: FileRevision
    text: str | None  # None: binary
    truncated: bool


def file_history(team: Team, path: str) -> list[FileRevision]:
    """A file's revisions, newest first (NotFound when it has none)."""
    rows = list(
        FileRevision.objects.filter(team=team, path=path)
        .select_related("agent", "turn", "blob")
        .defer("blob__content")
        .order_by("-number")
    )
    if not rows:
        raise NotFound(f"No revisions of {path!r} in team {team.slug!r}.")
    return rows


def revision_get(team: Team, path: str, number: int) -> RevisionText:
    """Revision `number` of a file, with its text (the first MAX_SHOWN_BYTES)."""
    revision = (
        FileRevision.objects.filter(team=team, path=path, number=number)
        .select_related("agent", "turn", "blob")
        .first()
    )
    if revision is None:
        raise NotFound(f"{path!r} has no revision {number} in team {team.slug!r}.")
    data = bytes(revision.blob.content)
    truncated = len(data) > MAX_SHOWN_BYTES
    shown = data[:MAX_SHOWN_BYTES]
    try:
        text = None if b"\x00" in shown else shown.decode("utf-8")
    except UnicodeDecodeError:
        text = shown.decode("utf-8", errors="ignore") if truncated else None
    return RevisionText(revision, text, truncated)


def revisions_as_of(team: Team, *, until: datetime) -> dict[str, FileRevision]:
    """Each file's newest revision written at or before `until`, by path; a file whose
    newest revision then is its deletion is left out."""
    found: dict[str, FileRevision] = {}
    rows = FileRevision.objects.filter(team=team, created_at__lte=until).select_related("blob")
    for row in rows.order_by("path", "number"):
        found[row.path] = row
    return {path: row for path, row in found.items() if not row.deleted}


def revision_out(revision: FileRevision) -> dict:
    """A revision as the API and the pages show it."""
    return {
        "number": revision.number,
        "sha256": revision.blob_id,
        "size": revision.blob.size,
        "agent": revision.agent.name if revision.agent else None,
        "turn": revision.turn.number if revision.turn else None,
        "note": revision.note,
        "deleted": revision.deleted,
        "created_at": revision.created_at,
    }


def blobs_prune(sender=None, **kwargs) -> None:
    """Remove blobs no revision uses any more (after a team's deletion commits)."""

    def prune():
        FileBlob.objects.filter(revisions__isnull=True).delete()

    transaction.on_commit(prune)
