"""Workspace tools: list and read the team's files (every role), write and edit them
(coders and reviewers, by default in implementation-like phases and the review-like
phases after one, where a finding is fixed in place). The guards and limits are
teams/files/workspace.py's."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from teams.conversation.phase_guide import WRITE_PHASES, write_phase
from teams.files import changes, workspace
from teams.models import Agent, FileRevision, Turn, TurnStep
from tools.base import MAX_RESULT_CHARS, Params, Tool, ToolContext, ToolResult
from tools.registry import register

# A file_read result's text, so the header and the note that follow fit in a result.
READ_CHARS = MAX_RESULT_CHARS - 1000
# How far back an agent's own file_read steps are searched for its last read of a file.
READS_SEARCHED = 200
WRITERS_NAMED = 4  # the most writers a "changed since" note names, the rest counted
PATH_HELP = "relative to the workspace, folders separated by '/'"


def _size(size: int | None) -> str:
    return "1 byte" if size == 1 else f"{size or 0:,} bytes"


class ListParams(Params):
    path: str = Field(
        default="",
        max_length=workspace.MAX_PATH_CHARS,
        description=f"A folder, {PATH_HELP} (e.g. 'src'). Omit for the top folder.",
    )


@register
class FileList(Tool):
    name = "file_list"
    writes = False
    description = (
        "List the files and folders of the team's workspace, the shared folder where the "
        "team's work lives: the top folder, or the folder you name. Shows each entry's "
        f"kind and size, by name (at most {workspace.MAX_LIST_ENTRIES})."
    )
    Params = ListParams

    def run(self, params: ListParams, ctx: ToolContext) -> str:
        listing = workspace.file_list(ctx.team, params.path)
        where = f"Folder {listing.path!r}" if listing.path else "The workspace"
        if not listing.total:
            return f"{where} is empty."
        count = "1 entry" if listing.total == 1 else f"{listing.total:,} entries"
        lines = [f"{where} ({count}):"]
        for entry in listing:
            if entry.kind == "folder":
                lines.append(f"  {entry.name}/  (folder)")
            elif entry.kind == "file":
                lines.append(f"  {entry.name}  ({_size(entry.size)})")
            elif entry.kind == "link":
                lines.append(f"  {entry.name}  (symbolic link)")
            else:
                lines.append(f"  {entry.name}  (special file, not readable)")
        if listing.truncated:
            lines.append(
                f"... and {listing.total - len(listing):,} more (only the first "
                f"{len(listing):,} by name are listed)."
            )
        return "\n".join(lines)


class ReadParams(Params):
    path: str = Field(
        max_length=workspace.MAX_PATH_CHARS,
        description=f"A file, {PATH_HELP} (e.g. 'src/parser.py')",
    )
    start_line: int = Field(
        default=1, ge=1, description="The line to start at (1 is the first). Default: 1."
    )


@register
class FileRead(Tool):
    name = "file_read"
    writes = False
    description = (
        "Read a text file of the team's workspace. A long file comes in parts: the result "
        "says which lines it shows and the start_line to read on from. Binary files are "
        f"reported with their size, not shown; only the first "
        f"{workspace.MAX_READ_BYTES // 1024} KB of a file can be read. When the file "
        "changed since you last read it, the result says who changed it."
    )
    Params = ReadParams

    def run(self, params: ReadParams, ctx: ToolContext) -> str:
        found = workspace.file_read(ctx.team, params.path)
        changed = changed_since_read(ctx, found.path)
        if found.binary:
            return f"{found.path} is a binary file ({_size(found.size)}{changed}): not shown."
        lines = found.text.splitlines(keepends=True)
        if not lines:
            return f"{found.path} is empty{changed and f' ({changed[2:]})'}."
        first = params.start_line
        if first > len(lines):
            return f"{found.path} has {len(lines):,} lines: start_line {first:,} is past its end."
        shown, used, last = [], 0, first - 1
        for line in lines[first - 1 :]:
            if shown and used + len(line) > READ_CHARS:
                break
            shown.append(line[:READ_CHARS])
            used += len(shown[-1])
            last += 1
        total = f"{len(lines):,}" + (" read" if found.truncated else "")
        head = f"{found.path} ({_size(found.size)}{changed}), lines {first:,}-{last:,} of {total}:"
        notes = []
        if len(lines[last - 1]) > READ_CHARS:
            notes.append(f"[Line {last:,} is cut at {READ_CHARS:,} characters.]")
        if last < len(lines):
            notes.append(
                f'[More follows: {self.name}(path="{found.path}", start_line={last + 1}).]'
            )
        elif found.truncated:
            notes.append(
                f"[The file goes on: only its first {workspace.MAX_READ_BYTES // 1024} KB "
                "can be read.]"
            )
        body = "".join(shown)
        return "\n".join([head, body.rstrip("\n"), *notes])


def changed_since_read(ctx: ToolContext, path: str) -> str:
    """The note "; changed by coder, then you, since you last read it" when the
    file was written after this agent's last read of it (its turns' file_read steps say
    when), "" when not, or when the agent never read it: a model that remembers an old
    version should know to trust this one."""
    read = _last_read(ctx.agent, path)
    if read is None:
        return ""
    revisions = (
        FileRevision.objects.filter(team=ctx.team, path=path, created_at__gt=read.created_at)
        .select_related("agent", "turn")
        .order_by("number")
    )
    writers: list[str] = []
    for revision in revisions:
        writer = _writer(revision, ctx.agent)
        if writer not in writers:
            writers.append(writer)
    if not writers:
        return ""
    named = ", then ".join(writers[:WRITERS_NAMED])
    if len(writers) > WRITERS_NAMED:
        named += f" and {len(writers) - WRITERS_NAMED} more"
    # No turn numbers: an agent sees none in its requests, so "turn 9" read as a riddle.
    when = " earlier in this turn" if ctx.turn is not None and read.turn_id == ctx.turn.id else ""
    return f"; changed by {named} since you last read it{when}"


def _writer(revision: FileRevision, reader: Agent) -> str:
    """Who wrote a revision, as the reader reads it ("coder", "you (a command)")."""
    if revision.agent_id is None:
        who = "someone outside the team's turns"
    else:
        who = "you" if revision.agent_id == reader.id else revision.agent.name
    if revision.note == changes.COMMAND_NOTE:
        who += " (a command)"
    return who


def _last_read(agent: Agent, path: str) -> TurnStep | None:
    """The agent's newest file_read step that read `path` (its result names the file
    first, as FileRead.run words it); errors and other files' reads do not count."""
    steps = (
        TurnStep.objects.filter(turn__agent=agent, kind=TurnStep.Kind.TOOL, tool_name=FileRead.name)
        .select_related("turn")
        .order_by("-id")[:READS_SEARCHED]
    )
    for step in steps:
        block = (step.content or [{}])[0]
        text = block.get("content")
        if block.get("is_error") or not isinstance(text, str):
            continue
        if any(text.startswith(path + after) for after in (" (", " is ", " has ")):
            return step
    return None


class WriteParams(Params):
    path: str = Field(
        max_length=workspace.MAX_PATH_CHARS,
        description=f"A file, {PATH_HELP} (e.g. 'src/parser.py')",
    )
    # Written exactly as given: no whitespace stripped.
    # At most MAX_WRITE_BYTES characters: the service still counts its UTF-8 bytes.
    content: Annotated[str, StringConstraints(strip_whitespace=False)] = Field(
        max_length=workspace.MAX_WRITE_BYTES,
        description=f"The whole new text of the file (at most {workspace.MAX_WRITE_BYTES // 1024} "
        "KB as UTF-8)",
    )


def writes_in(turn: Turn | None) -> int:
    """The successful file writes already made in `turn` (its recorded tool steps)."""
    if turn is None:
        return 0
    steps = TurnStep.objects.filter(
        turn=turn, kind=TurnStep.Kind.TOOL, tool_name__in=(FileWrite.name, FileEdit.name)
    ).values_list("content", flat=True)
    return sum(1 for content in steps if content and not content[0].get("is_error"))


@register
class FileWrite(Tool):
    name = "file_write"
    description = (
        "Write a text file in the team's workspace, replacing it if it exists; folders "
        "are made as needed. Give the whole content. At most "
        f"{workspace.MAX_WRITE_BYTES // 1024} KB per file and "
        f"{workspace.MAX_WRITES_PER_TURN} writes per turn. Paths stay inside the "
        "workspace: trying to leave it is recorded as a violation."
    )
    Params = WriteParams
    ability = "writes files"
    roles = frozenset({Agent.Role.CODER.value, Agent.Role.REVIEWER.value})
    phase_rule = (WRITE_PHASES, write_phase)

    def run(self, params: WriteParams, ctx: ToolContext) -> str | ToolResult:
        try:
            written = workspace.file_write(
                team=ctx.team,
                agent=ctx.agent,
                turn=ctx.turn,
                path=params.path,
                content=params.content,
                writes_this_turn=writes_in(ctx.turn),
            )
        except workspace.OutsideWorkspace as exc:
            # Returned, not raised: raising would roll back the violation it recorded.
            return ToolResult(
                f"Error: {exc.message} Not written; the attempt is recorded as a violation.",
                is_error=True,
            )
        what = "new file" if written.created else f"write {written.writes:,} of this file"
        text = f"Wrote {written.path} ({_size(written.size)}, {what})."
        if ctx.turn is not None:
            text += (
                f" {written.writes_this_turn} of {workspace.MAX_WRITES_PER_TURN} writes used "
                "this turn."
            )
        return text


class EditParams(Params):
    path: str = Field(
        max_length=workspace.MAX_PATH_CHARS,
        description=f"A file, {PATH_HELP} (e.g. 'src/parser.py')",
    )
    # Matched and written exactly as given: no whitespace stripped.
    old_text: Annotated[str, StringConstraints(strip_whitespace=False)] = Field(
        min_length=1,
        max_length=workspace.MAX_WRITE_BYTES,
        description="The exact text to replace, as the file has it (spaces and line breaks "
        "included); it must occur exactly once: add surrounding lines to make it unique",
    )
    new_text: Annotated[str, StringConstraints(strip_whitespace=False)] = Field(
        max_length=workspace.MAX_WRITE_BYTES, description="The text that replaces it"
    )


@register
class FileEdit(Tool):
    name = "file_edit"
    description = (
        "Edit a text file of the team's workspace in place: replace the one occurrence of "
        "old_text with new_text. When old_text occurs zero or several times nothing "
        "changes and the result says how many times it was found. Counts as a write "
        f"(at most {workspace.MAX_WRITES_PER_TURN} writes per turn, with file_write)."
    )
    Params = EditParams
    roles = FileWrite.roles
    phase_rule = FileWrite.phase_rule

    def run(self, params: EditParams, ctx: ToolContext) -> str | ToolResult:
        try:
            written = changes.file_edit(
                team=ctx.team,
                agent=ctx.agent,
                turn=ctx.turn,
                path=params.path,
                old_text=params.old_text,
                new_text=params.new_text,
                writes_this_turn=writes_in(ctx.turn),
            )
        except workspace.OutsideWorkspace as exc:
            # Returned, not raised: raising would roll back the violation it recorded.
            return ToolResult(
                f"Error: {exc.message} Not edited; the attempt is recorded as a violation.",
                is_error=True,
            )
        text = (
            f"Edited {written.path} ({_size(written.size)}, write {written.writes:,} of this file)."
        )
        if ctx.turn is not None:
            text += (
                f" {written.writes_this_turn} of {workspace.MAX_WRITES_PER_TURN} writes used "
                "this turn."
            )
        return text
