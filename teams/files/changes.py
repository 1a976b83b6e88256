"""Changes to the workspace other than a whole write: an edit in place (`file_edit`)
and what a command changed (`command_changes_record`, after teams.files.sandbox ran one).

An edit replaces exactly one occurrence of a text; no occurrence, or several, is an
InvalidInput saying how many, and nothing changes. It is then a write like file_write's:
same guards, limits and revision.

A command's changes are found by comparing the workspace before and after it (each
regular file's size, times and inode; links, special files and the folders of
IGNORED_FOLDERS are not looked at): files created or changed are recorded as revisions
of the turn with the note "written by a command" (who wrote them last, files_touched, the live
event, as file_write's), files deleted as a deletion revision. At most MAX_RECORDED files
a command, of at most MAX_WRITE_BYTES each, are recorded; the rest are named as not
recorded. A workspace of more than MAX_SCANNED files is compared on its first
MAX_SCANNED."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from teams.conversation import hierarchy
from teams.errors import InvalidInput
from teams.files import revisions, workspace
from teams.models import Agent, FileRevision, Team, Turn, WorkspaceFile

# Caches and tool folders a command fills: not the team's work.
IGNORED_FOLDERS = frozenset(
    {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules",
     ".venv", ".tox", ".cache"}
)  # fmt: skip
MAX_SCANNED = 5000
MAX_RECORDED = 100
COMMAND_NOTE = "written by a command"
DELETED_NOTE = "deleted by a command"


# --- file_edit -----------------------------------------------------------------------


def file_edit(
    *,
    team: Team,
    agent: Agent,
    turn: Turn | None,
    path: str,
    old_text: str,
    new_text: str,
    writes_this_turn: int,
) -> workspace.Written:
    """Replace the one occurrence of `old_text` in a text file with `new_text`."""
    if not old_text:
        raise InvalidInput("old_text is empty: give the exact text to replace.", field="old_text")
    if old_text == new_text:
        raise InvalidInput("old_text and new_text are the same: nothing to change.")
    try:
        found = workspace.file_read(team, path)
    except workspace.OutsideWorkspace:
        hierarchy.agent_record_violation(agent=agent)
        raise
    if found.binary:
        raise InvalidInput(f"{workspace.shown(found.path)} is a binary file: it is not edited.")
    if found.truncated:
        raise InvalidInput(
            f"{workspace.shown(found.path)} is over {workspace.MAX_READ_BYTES // 1024} KB: "
            "an edit reads a file whole: write the file whole instead."
        )
    count = found.text.count(old_text)
    if count != 1:
        where = workspace.shown(found.path)
        if count == 0:
            raise InvalidInput(
                f"old_text was not found in {where} (0 matches): nothing changed. Read the "
                "file again and copy the text exactly, spaces and line breaks included.",
                field="old_text",
            )
        raise InvalidInput(
            f"old_text occurs {count} times in {where}: nothing changed. Include more of the "
            "surrounding lines so that it matches exactly once.",
            field="old_text",
        )
    return workspace.file_write(
        team=team,
        agent=agent,
        turn=turn,
        path=found.path,
        content=found.text.replace(old_text, new_text, 1),
        writes_this_turn=writes_this_turn,
    )


# --- a command's changes ---------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    files: dict[str, tuple]  # relative path -> (size, mtime_ns, ctime_ns, inode)
    complete: bool


def snapshot(root: Path) -> Snapshot:
    """The workspace's regular files (links and special files left out, the ignored
    folders not entered), at most MAX_SCANNED."""
    files: dict[str, tuple] = {}
    pending = [("", str(root))]
    while pending:
        rel, folder = pending.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and entry.name not in IGNORED_FOLDERS:
                pending.append((name, entry.path))
            elif stat.S_ISREG(st.st_mode):
                if len(files) >= MAX_SCANNED:
                    return Snapshot(files, complete=False)
                files[name] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return Snapshot(files, complete=True)


@dataclass
class CommandChanges:
    created: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    not_recorded: list[str] = field(default_factory=list)  # "path (why)"
    complete: bool = True

    def summary(self) -> str:
        """One line per kind of change ("" when nothing changed)."""
        lines = []
        for word, paths in (("Created", self.created), ("Changed", self.changed)):
            if paths:
                lines.append(f"{word}: {_listed(paths)}.")
        if self.deleted:
            lines.append(f"Deleted: {_listed(self.deleted)}.")
        if lines:
            lines.append("(Recorded as revisions of this turn.)")
        if self.not_recorded:
            lines.append(f"Not recorded: {_listed(self.not_recorded)}.")
        if not self.complete:
            lines.append(f"Only the first {MAX_SCANNED:,} files of the workspace were compared.")
        return "\n".join(lines)


def _listed(paths: list[str], shown: int = 20) -> str:
    more = f" and {len(paths) - shown:,} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def _contents(root: Path, rel: str) -> bytes | None:
    """A regular file's bytes, reached without following a link; None when it is gone,
    or is no longer a regular file."""
    try:
        fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            if sum(map(len, chunks)) > workspace.MAX_WRITE_BYTES:
                break
        return b"".join(chunks)
    finally:
        os.close(fd)


def _drop_privilege_bits(path: Path) -> None:
    """A file a command made setuid or setgid loses those bits: inside, the command is
    the host's Loom user, and the workspace is no place for such a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
            os.fchmod(fd, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
    finally:
        os.close(fd)


def _recordable(rel: str) -> str:
    """Why `rel` cannot be recorded, or ""."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    if len(rel) > workspace.MAX_PATH_CHARS:
        return f"its path is over {workspace.MAX_PATH_CHARS} characters"
    return ""


def command_changes_record(
    *, team: Team, agent: Agent, turn: Turn | None, root: Path, before: Snapshot
) -> CommandChanges:
    """Record what changed in the workspace since `before` (see the module's docstring)."""
    after = snapshot(root)
    changes = CommandChanges(complete=before.complete and after.complete)
    touched = sorted(p for p in after.files if before.files.get(p) != after.files[p])
    latest = dict(
        FileRevision.objects.filter(team=team, path__in=touched)
        .order_by("path", "number")
        .values_list("path", "blob_id")
    )
    for rel in touched:
        _drop_privilege_bits(root / rel)
    with transaction.atomic():
        for rel in touched:
            why = _recordable(rel)
            data = None if why else _contents(root, rel)
            if not why and data is not None and len(data) > workspace.MAX_WRITE_BYTES:
                why = f"over {workspace.MAX_WRITE_BYTES // 1024} KB"
            if why or data is None:
                changes.not_recorded.append(f"{rel} ({why or 'gone meanwhile'})")
                continue
            if latest.get(rel) == hashlib.sha256(data).hexdigest():
                continue  # touched, same content
            if len(changes.created) + len(changes.changed) >= MAX_RECORDED:
                changes.not_recorded.append(f"{rel} (over {MAX_RECORDED} files)")
                continue
            (changes.changed if rel in before.files else changes.created).append(rel)
            workspace.write_record(team, agent, turn, rel, data, 0, note=COMMAND_NOTE)
        for rel in sorted(set(before.files) - set(after.files)):
            if _recordable(rel):
                continue
            changes.deleted.append(rel)
            if FileRevision.objects.filter(team=team, path=rel).exists():
                revisions.revision_add(
                    team=team, path=rel, data=b"", agent=agent, turn=turn,
                    note=DELETED_NOTE, deleted=True,
                )  # fmt: skip
            WorkspaceFile.objects.filter(team=team, path=rel).delete()
    return changes


def command_files_replay(
    *, original: Turn, team: Team, agent: Agent, turn: Turn, after, until
) -> CommandChanges:
    """A replay's run_command: the files the original's command changed (its revisions
    of `original` recorded after `after` and by `until`) written into `team`'s
    workspace and recorded as the replay's own, the command itself not run."""
    rows = FileRevision.objects.filter(
        turn=original, note__in=(COMMAND_NOTE, DELETED_NOTE), created_at__lte=until
    )
    if after is not None:
        rows = rows.filter(created_at__gt=after)
    newest = {row.path: row for row in rows.select_related("blob").order_by("path", "number")}
    root = workspace.workspace_root(team)
    before = snapshot(root)
    for rel, row in newest.items():
        target = workspace.resolve(team, rel)
        if row.deleted:
            if target.is_file() and not target.is_symlink():
                target.unlink()
            continue
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(target, flags, 0o600)
        try:
            view = memoryview(bytes(row.blob.content))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    return command_changes_record(team=team, agent=agent, turn=turn, root=root, before=before)
