"""A team's workspace: the one folder its agents' file tools may list, read and write.

The folder is the team's `workspace` field when set (a custom folder only a superuser
names: an absolute path, or one relative to LOOM_DATA_DIR), else its default folder
`$LOOM_DATA_DIR/workspaces/<team.folder>`, named by the team's own UUID, never by its
slug: a renamed team keeps its files, and a team later given the old slug starts with
an empty folder of its own. It is made when first needed, readable by Loom's user
alone (0700). Nothing outside it is ever listed, read, written or created.

A deleted team's default folder is removed with it (once the deletion is committed;
`team_deleted`, connected in teams.apps), so no leftover waits for anyone. A custom
folder is the superuser's: Loom never removes or moves it (it may be a checkout that
other tools use, or shared by two teams on purpose).

Messages never show a folder's place on the server: paths are relative to the
workspace, and the folder itself is "team 'x''s workspace".

Paths are relative to the workspace, folders separated by "/"; "" (or ".") is the
workspace itself. `resolve` refuses, naming the path and why:

- a ".." segment anywhere, an absolute path, a leading "~";
- backslashes (folders are separated by "/" only) and percent-escapes ("%2e", "%2f",
  any "%" and two hex digits): a path is used exactly as written and never
  URL-decoded, so "%2e%2e" cannot mean "..". A lone "%" ("100%.txt") is fine;
- NUL bytes, other control characters, text that is not valid UTF-8;
- empty segments (a trailing or doubled "/"), segments made only of dots (".", "...",
  "...."; only the whole path "." means the workspace), names over MAX_NAME_BYTES
  bytes, paths over MAX_PATH_CHARS characters (WorkspaceFile.path holds 500);
- symbolic links that lead outside the workspace, at any segment (the leaf or a folder
  on the way), dangling links and link loops. Links that stay inside are followed;
  the file actually used is the resolved one, and it is what WorkspaceFile records;
- anything but regular files and folders: FIFOs, sockets, devices. Types are checked
  with lstat before use and again with fstat on the open file.

The checks are made on the resolved path, then the file is reached again from the
workspace folder one segment at a time with O_NOFOLLOW (openat), so a link swapped in
after the check is never followed; a FIFO is opened (if ever) with O_NONBLOCK.

A refused write that leaves the workspace, or spells a way out ("..", "/…", "~…", also
through backslashes or percent-escapes, or a link out), is recorded as a violation
of the agent (teams.conversation.hierarchy.agent_record_violation), which costs it drift.

Limits:

- MAX_LIST_ENTRIES (500): entries a listing shows, by name; it says how many there are;
- MAX_READ_BYTES (100 KB): bytes read from a file; more is reported as truncated.
  A file with a NUL byte, or that is not UTF-8, is reported as binary with its size;
- MAX_WRITE_BYTES (200 KB): the UTF-8 size of one file written;
- MAX_WRITES_PER_TURN (20): successful writes of one agent in one turn. The count
  comes from the turn's own steps (the write tool counts its successful TurnStep rows
  and passes it as `writes_this_turn`), so a turn resumed after a crash keeps it;
  writes made outside a turn (a program calling the tool over the API) count against
  no turn (the API's rate limit bounds them);
- MAX_FILES_TOUCHED (200): paths kept in an agent's files_touched (unique, the newest).

Each write also keeps the content it wrote as the file's next revision
(teams.files.revisions: content-addressed, the same content stored once).

Writes are atomic: the content goes to a temporary file in the same folder (0600, or
the replaced file's mode), is synced, and replaces the file with os.replace; missing
folders are made (0700). Each write records the file's WorkspaceFile row (size, agent,
turn, writes + 1) and adds the path to the agent's files_touched, which drift reads.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from teams.conversation import hierarchy
from teams.errors import InvalidInput, NotFound
from teams.files import revisions
from teams.live import events
from teams.live.event_payloads import WorkspaceFileOut
from teams.models import Agent, Team, Turn, WorkspaceFile

MAX_PATH_CHARS = 500
MAX_NAME_BYTES = 255
MAX_LIST_ENTRIES = 500
MAX_READ_BYTES = 100 * 1024
MAX_WRITE_BYTES = 200 * 1024
MAX_WRITES_PER_TURN = 20
MAX_FILES_TOUCHED = 200

PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
CONTROL = re.compile(r"[\x01-\x1f\x7f]")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class OutsideWorkspace(InvalidInput):
    """A path that leaves the workspace, or spells a way out of it."""


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # relative to the workspace
    kind: str  # "file", "folder", "link" (never followed here) or "other"
    size: int | None  # bytes, for files


@dataclass(frozen=True)
class Listing:
    """A folder's entries, by name, at most MAX_LIST_ENTRIES; iterates over them."""

    path: str
    entries: list[Entry]
    total: int

    @property
    def truncated(self) -> bool:
        return self.total > len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(frozen=True)
class FileText:
    """What a bounded read found. Unpacks as (text, truncated); for a binary file the
    text is a one-line note and `binary` is set."""

    path: str
    text: str
    truncated: bool
    size: int
    binary: bool = False

    def __iter__(self):
        return iter((self.text, self.truncated))


@dataclass(frozen=True)
class Written:
    path: str
    size: int
    writes: int  # writes of this file so far, this one included
    created: bool
    writes_this_turn: int  # this one included


@dataclass(frozen=True)
class _Located:
    root: Path  # the real workspace folder
    real: Path  # the resolved path, inside root
    rel: str  # real, relative to root ("" for the root)
    exists: bool
    mode: int | None = field(default=None)  # lstat mode of `real` when it exists


def shown(path: str, limit: int = 80) -> str:
    """A path as messages name it: quoted, control characters escaped, long ones cut."""
    if len(path) > limit:
        return repr(path[:limit])[:-1] + "…'" + f" ({len(path):,} characters)"
    return repr(path)


def _refuse(path: str, reason: str, *, outside: bool = False) -> InvalidInput:
    error = OutsideWorkspace if outside else InvalidInput
    return error(f"Path {shown(path)} {reason}", field="path")


# --- the root --------------------------------------------------------------------


def workspaces_folder() -> Path:
    """Where the teams' default folders are: $LOOM_DATA_DIR/workspaces."""
    return Path(settings.DATA_DIR) / "workspaces"


def default_root(team: Team) -> Path:
    """The team's default folder, named by its own UUID (whether or not it exists)."""
    return workspaces_folder() / str(team.folder)


def workspace_root(team: Team) -> Path:
    """The team's workspace folder (made, 0700, when missing), as its real path."""
    custom = bool(team.workspace)
    if custom:
        root = Path(team.workspace).expanduser()
        if not root.is_absolute():
            root = Path(settings.DATA_DIR) / root
    else:
        workspaces_folder().mkdir(mode=0o700, parents=True, exist_ok=True)
        root = default_root(team)
    which = "custom workspace folder" if custom else "workspace folder"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(
            f"Team {team.slug!r}'s {which} cannot be made: {exc.strerror}."
        ) from None
    real = root.resolve()
    if not real.is_dir():
        raise InvalidInput(f"Team {team.slug!r}'s {which} is not a folder.")
    return real


def team_deleted(sender, instance: Team, **kwargs) -> None:
    """A deleted team's default folder goes with it, once the deletion is committed
    (a rolled-back deletion keeps it). A custom folder is left alone."""
    if instance.workspace or not instance.folder:
        return
    folder = default_root(instance)
    transaction.on_commit(lambda: folder_remove(folder))


def folder_remove(folder: Path) -> None:
    """Remove a default folder and what it holds, never following a link out of it."""
    if folder.is_symlink():
        folder.unlink(missing_ok=True)
    elif folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)


# --- paths -------------------------------------------------------------------------


def _spells_a_way_out(path: str) -> bool:
    """Does the path, read with backslashes as separators and percent-escapes decoded
    (up to three times), go up, start at the root or at a home folder?"""
    candidate = path
    for _ in range(4):
        for separated in {candidate, candidate.replace("\\", "/")}:
            if separated.startswith(("/", "~")) or ".." in separated.split("/"):
                return True
        decoded = re.sub(PERCENT_ESCAPE, lambda m: chr(int(m.group()[1:], 16)), candidate)
        if decoded == candidate:
            break
        candidate = decoded
    return False


def _segments(path: str) -> list[str]:
    """The path's segments once its text is checked (see the module's docstring)."""
    if not isinstance(path, str):
        raise InvalidInput("A path is text, relative to the workspace.", field="path")
    if "\x00" in path:
        raise _refuse(path, "contains a NUL byte.")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(path, "is not valid UTF-8 text.") from None
    if len(path) > MAX_PATH_CHARS:
        raise _refuse(path, f"is too long: at most {MAX_PATH_CHARS:,} characters.")
    if path in ("", "."):
        return []
    if path.startswith("/"):
        raise _refuse(
            path,
            "is absolute: paths are relative to the workspace (e.g. 'src/app.py').",
            outside=True,
        )
    if path.startswith("~"):
        raise _refuse(
            path, "starts with '~': home folders are outside the workspace.", outside=True
        )
    if ".." in path.split("/"):
        raise _refuse(path, "goes up with '..', out of the workspace.", outside=True)
    if _spells_a_way_out(path):
        raise _refuse(
            path,
            "spells a way out of the workspace ('..', '/' or '~' through backslashes or "
            "percent-escapes).",
            outside=True,
        )
    if "\\" in path:
        raise _refuse(path, "contains a backslash: separate folders with '/'.")
    escape = PERCENT_ESCAPE.search(path)
    if escape:
        raise _refuse(
            path,
            f"contains a percent-escape ({escape.group()!r}): paths are used as written, "
            "never URL-decoded; write the characters themselves.",
        )
    control = CONTROL.search(path)
    if control:
        raise _refuse(path, f"contains a control character (U+{ord(control.group()):04X}).")
    segments = path.split("/")
    for segment in segments:
        if segment == "":
            raise _refuse(
                path, "has an empty segment (a leading, doubled or trailing '/'): remove it."
            )
        if set(segment) == {"."}:
            raise _refuse(path, f"has a name made only of dots ({segment!r}).")
        if len(segment.encode("utf-8")) > MAX_NAME_BYTES:
            raise _refuse(path, f"has a name longer than {MAX_NAME_BYTES} bytes.")
    return segments


def _inside(target: Path, root: Path) -> bool:
    return target == root or root in target.parents


def _relative(path: Path, root: Path) -> str:
    return "" if path == root else path.relative_to(root).as_posix()


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def _what(mode: int) -> str:
    """The kind of a file that is neither a regular file nor a folder, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def _locate(team: Team, path: str) -> _Located:
    segments = _segments(path)
    root = workspace_root(team)
    current, mode = root, os.lstat(root).st_mode
    for index, segment in enumerate(segments):
        here = "/".join(segments[: index + 1])
        candidate = current / segment
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            real = current.joinpath(*segments[index:])
            return _Located(root, real, _relative(real, root), False)
        except OSError as exc:
            raise _refuse(path, f"cannot be reached ({exc.strerror}).") from None
        if stat.S_ISLNK(st.st_mode):
            # "is a link..." for the last segment, "goes through 'a/b', a link..." before it.
            link = (
                "is a symbolic link" if here == path else f"goes through {here!r}, a symbolic link"
            )
            try:
                target = Path(os.path.realpath(candidate, strict=True))
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _refuse(path, f"{link} in a loop.") from None
                if not _inside(Path(os.path.realpath(candidate)), root):
                    raise _refuse(
                        path, f"{link} that leads outside the workspace.", outside=True
                    ) from None
                raise _refuse(path, f"{link} to nothing.") from None
            if not _inside(target, root):
                raise _refuse(path, f"{link} that leads outside the workspace.", outside=True)
            st = os.lstat(target)
            candidate = target
        current, mode = candidate, st.st_mode
        if index < len(segments) - 1 and not stat.S_ISDIR(mode):
            raise _refuse(path, f"goes through {here!r}, which is not a folder.")
    return _Located(root, current, _relative(current, root), True, mode)


def resolve(team: Team, path: str) -> Path:
    """The real path `path` names in the team's workspace (it may not exist yet), or
    InvalidInput naming the path and why it is refused (OutsideWorkspace when it
    leaves the workspace or spells a way out)."""
    return _locate(team, path).real


def relative(team: Team, path: str) -> str:
    """The path as the workspace records it (links inside resolved), refused as
    `resolve` refuses; for looking up a file's revisions."""
    return _locate(team, path).rel


# --- reaching a file again, without following links ------------------------------


def _open_folder(path: str, root: Path, segments: list[str], *, create: bool = False) -> int:
    """A descriptor of root/segments..., reached one segment at a time with
    O_NOFOLLOW; missing folders are made (0700) when `create`."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for segment in segments:
            try:
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise NotFound(f"No folder {shown(path)} in the workspace.") from None
                try:
                    os.mkdir(segment, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError as exc:
        os.close(fd)
        raise _refuse(path, f"changed while it was being opened ({exc.strerror}).") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


# --- the operations ---------------------------------------------------------------


def file_list(team: Team, path: str = "") -> Listing:
    """The entries of a folder of the workspace (its top by default), by name, at
    most MAX_LIST_ENTRIES of them. Links are listed, never followed."""
    located = _locate(team, path)
    if not located.exists:
        raise NotFound(f"No folder {shown(path)} in the workspace.")
    if not stat.S_ISDIR(located.mode):
        if stat.S_ISREG(located.mode):
            raise _refuse(path, "is a file, not a folder: read it instead.")
        raise _refuse(path, f"is {_what(located.mode)}, not a folder.")
    segments = located.rel.split("/") if located.rel else []
    fd = _open_folder(path, located.root, segments)
    try:
        with os.scandir(fd) as scan:
            found = sorted(scan, key=lambda e: e.name)
        entries = []
        for item in found[:MAX_LIST_ENTRIES]:
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            kind = _kind(st.st_mode)
            entries.append(
                Entry(
                    name=item.name,
                    path=f"{located.rel}/{item.name}" if located.rel else item.name,
                    kind=kind,
                    size=st.st_size if kind == "file" else None,
                )
            )
    finally:
        os.close(fd)
    return Listing(path=located.rel, entries=entries, total=len(found))


def file_records(team: Team, paths: list[str]) -> dict[str, WorkspaceFile]:
    """The WorkspaceFile rows of these paths (who wrote each last, in which turn)."""
    rows = WorkspaceFile.objects.filter(team=team, path__in=paths).select_related("agent", "turn")
    return {row.path: row for row in rows}


def written(row: WorkspaceFile | None) -> dict:
    """Who wrote a file last, in which turn (its number), how often and when: None
    and 0 for a file no agent wrote."""
    return {
        "written_by": row.agent.name if row and row.agent_id else None,
        "turn": row.turn.number if row and row.turn_id else None,
        "writes": row.writes if row else 0,
        "updated_at": row.updated_at if row else None,
    }


def folder_entries(team: Team, path: str = "") -> tuple[Listing, list[tuple[Entry, dict]]]:
    """A folder's listing and each entry with `written` of it (files only; folders
    and other entries get the empty record): what the API and the PM's page show."""
    listing = file_list(team, path)
    records = file_records(team, [e.path for e in listing if e.kind == "file"])
    return listing, [
        (e, written(records.get(e.path) if e.kind == "file" else None)) for e in listing
    ]


def file_written(team: Team, path: str) -> dict:
    """`written` of one file (its resolved path, as file_read returns it)."""
    return written(file_records(team, [path]).get(path))


def _decoded(data: bytes, truncated: bool) -> str | None:
    """UTF-8 text, or None for binary (a NUL byte, or not UTF-8); a cut through the
    last character of a truncated read is not binary."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8", errors="strict")
        return None


def file_read(team: Team, path: str, limit: int = MAX_READ_BYTES) -> FileText:
    """A text file's first `limit` bytes (at most MAX_READ_BYTES); a binary file is
    reported by its size. Only regular files are opened."""
    limit = max(0, min(limit, MAX_READ_BYTES))
    located = _locate(team, path)
    if not located.rel:
        raise _refuse(path, "is the workspace folder: name a file in it.")
    if not located.exists:
        raise NotFound(f"No file {shown(path)} in the workspace.")
    if stat.S_ISDIR(located.mode):
        raise _refuse(path, "is a folder, not a file: list it instead.")
    if not stat.S_ISREG(located.mode):
        raise _refuse(path, f"is {_what(located.mode)}, not a regular file: it is not read.")
    *folders, name = located.rel.split("/")
    folder = _open_folder(path, located.root, folders)
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=folder)
        except FileNotFoundError:
            raise NotFound(f"No file {shown(path)} in the workspace.") from None
        except OSError as exc:
            raise _refuse(path, f"changed while it was being opened ({exc.strerror}).") from None
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, f"is {_what(st.st_mode)}, not a regular file: it is not read.")
        chunks, wanted = [], limit + 1
        while wanted > 0:
            chunk = os.read(fd, wanted)
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    truncated = len(data) > limit or st.st_size > limit
    data = data[:limit]
    size = max(st.st_size, len(data))
    text = _decoded(data, truncated)
    if text is None:
        note = f"[binary file, {size:,} bytes: not shown]"
        return FileText(path=located.rel, text=note, truncated=False, size=size, binary=True)
    return FileText(path=located.rel, text=text, truncated=truncated, size=size)


def file_write(
    *,
    team: Team,
    agent: Agent,
    turn: Turn | None,
    path: str,
    content: str,
    writes_this_turn: int,
) -> Written:
    """Write a text file (replacing it), atomically, making missing folders.

    `writes_this_turn` is how many writes the agent already made in `turn` (see the
    module's docstring). A path that leaves the workspace is recorded as a violation
    of the agent before the refusal is raised: a caller inside a transaction must not
    roll it back (the write tool returns the refusal instead of raising it)."""
    try:
        located = _locate(team, path)
    except OutsideWorkspace:
        hierarchy.agent_record_violation(agent=agent)
        raise
    if not located.rel:
        raise _refuse(path, "is the workspace folder: name a file in it.")
    if located.exists and not stat.S_ISREG(located.mode):
        if stat.S_ISDIR(located.mode):
            raise _refuse(path, "is a folder: a file cannot replace it.")
        raise _refuse(path, f"is {_what(located.mode)}, not a regular file: it is not written.")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"The content for {shown(path)} is not valid UTF-8 text.", field="content"
        ) from None
    if len(data) > MAX_WRITE_BYTES:
        raise InvalidInput(
            f"The content for {shown(path)} is {len(data):,} bytes; a file may have at most "
            f"{MAX_WRITE_BYTES:,} bytes ({MAX_WRITE_BYTES // 1024} KB). Split it into "
            "smaller files.",
            field="content",
        )
    if turn is not None and writes_this_turn >= MAX_WRITES_PER_TURN:
        raise InvalidInput(
            f"Not written: {shown(path)}. You already wrote {writes_this_turn} files this "
            f"turn, the limit is {MAX_WRITES_PER_TURN} writes per turn. Continue next turn."
        )
    if len(located.rel) > MAX_PATH_CHARS:  # a link inside may resolve to a longer path
        raise _refuse(path, f"resolves to a path over {MAX_PATH_CHARS:,} characters.")
    _replace(path, located, data)
    return write_record(team, agent, turn, located.rel, data, writes_this_turn + 1)


def _replace(path: str, located: _Located, data: bytes) -> None:
    """The file at located.rel now holds `data`: a synced temporary file in the same
    folder replaces it (os.replace never follows a link at the destination)."""
    *folders, name = located.rel.split("/")
    folder = _open_folder(path, located.root, folders, create=True)
    temporary = f".loom-{secrets.token_hex(8)}.tmp"
    try:
        try:
            existing = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise _refuse(path, f"is {_what(existing.st_mode)}, not a regular file.")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, 0o600, dir_fd=folder)
        try:
            if existing is not None:
                os.fchmod(fd, stat.S_IMODE(existing.st_mode) & 0o777)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        temporary = ""
    except OSError as exc:
        raise _refuse(path, f"could not be written ({exc.strerror}).") from None
    finally:
        if temporary:
            try:
                os.unlink(temporary, dir_fd=folder)
            except OSError:
                pass
        os.close(folder)


def write_record(
    team: Team, agent: Agent, turn: Turn | None, rel: str, data: bytes, count: int, note: str = ""
) -> Written:
    """The file's row (who wrote it last, in which turn, how often), its revision
    (teams.files.revisions) and the agent's files_touched (unique, the newest
    MAX_FILES_TOUCHED)."""
    size = len(data)
    values = {"size": size, "agent": agent, "turn": turn, "updated_at": timezone.now()}
    with transaction.atomic():
        revisions.revision_add(team=team, path=rel, data=data, agent=agent, turn=turn, note=note)
        rows = WorkspaceFile.objects.filter(team=team, path=rel)
        created = False
        if not rows.update(writes=F("writes") + 1, **values):
            try:
                with transaction.atomic():
                    WorkspaceFile.objects.create(team=team, path=rel, writes=1, **values)
                created = True
            except IntegrityError:  # made meanwhile by another writer
                rows.update(writes=F("writes") + 1, **values)
        writes = rows.values_list("writes", flat=True).first() or 1
        touched = list(
            Agent.objects.select_for_update()
            .filter(pk=agent.pk)
            .values_list("files_touched", flat=True)
            .first()
            or []
        )
        if rel not in touched:
            touched = [*touched, rel][-MAX_FILES_TOUCHED:]
            Agent.objects.filter(pk=agent.pk).update(files_touched=touched)
        agent.files_touched = touched
        row = WorkspaceFile.objects.select_related("agent", "turn").filter(team=team, path=rel)
        events.publish(
            events.FileWritten(
                file=WorkspaceFileOut.of(row.get()), files=team.workspace_files.count()
            ),
            team_id=team.id,
        )
    return Written(path=rel, size=size, writes=writes, created=created, writes_this_turn=count)
