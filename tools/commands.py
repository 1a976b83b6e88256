"""run_command: one shell command in the team's workspace, inside a bubblewrap sandbox
(teams.files.sandbox), its file changes recorded as revisions of the turn
(teams.files.changes).

Offered only where a sandbox can run on this host, to coders, reviewers and testers in
implementation-like and review-like phases by default (the team's tool_access changes
that), with the team's approval policy (auto by default: the sandbox is the guard). In a
replay the command is never run again: the original's recorded result answers.

Each command also leaves one line in the team conversation (team_note), so teammates who
cannot run commands see the evidence ("[Loom] coder: ran `python -m pytest -q`: exit code
0 after 1.2 s; last line: 25 passed in 0.03s"); the runner's own history leaves it out (a
system row is its author's own record: teams.engine.history_rows), its digest says it."""

from __future__ import annotations

from pydantic import Field

from teams import services
from teams.conversation.phase_guide import WORK_PHASES, work_phase
from teams.files import changes, sandbox, workspace
from teams.models import Agent, Message, Team
from tools.base import MAX_RESULT_CHARS, Params, Tool, ToolContext, ToolResult, _short, truncate
from tools.registry import register

MAX_COMMAND_CHARS = 10_000
DEFAULT_TIMEOUT = 60
# Room in a result for the status line and the file changes beside the output.
OUTPUT_CHARS = MAX_RESULT_CHARS - 1500
NOTE_COMMAND_CHARS = 160  # of the command in the team's line; the runner's result has it all
NOTE_LAST_LINE_CHARS = 160
# The report's own lines around the output (report()), which the team's line skips.
REPORT_LINES = ("stdout:", "stderr:", "(no output)", "(Recorded as revisions of this turn.)")
REPORT_PREFIXES = (
    "Created: ", "Changed: ", "Deleted: ", "Not recorded: ", "Only the first ",
    "[Result truncated: ",
)  # fmt: skip


class RunParams(Params):
    command: str = Field(
        min_length=1,
        max_length=MAX_COMMAND_CHARS,
        description="One shell command, run with /bin/sh -c in the workspace folder "
        "(e.g. 'python -m pytest -q' or 'python src/app.py --help')",
    )
    timeout_seconds: int = Field(
        default=DEFAULT_TIMEOUT,
        ge=1,
        le=3600,
        description=f"Seconds it may run (default {DEFAULT_TIMEOUT}; at most the site's "
        "limit, 300 s unless configured)",
    )


@register
class RunCommand(Tool):
    name = "run_command"
    description = (
        "Run one shell command in the team's workspace (its folder is the working "
        "directory) inside a sandbox: Python 3 with pytest is there, the network is not, "
        "and only the workspace is writable. Returns the exit code, the duration and "
        "stdout and stderr (long output keeps its start and end). Files the command "
        "creates, changes or deletes are recorded as this turn's changes. Every process "
        "it started is stopped when it returns: nothing runs in the background."
    )
    Params = RunParams
    roles = frozenset({Agent.Role.CODER.value, Agent.Role.REVIEWER.value, Agent.Role.TESTER.value})
    ability = "runs commands"
    phase_rule = (WORK_PHASES, work_phase)
    runs_long = True

    @classmethod
    def refusal(cls, team: Team) -> str:
        """No sandbox on this host: not offered to anyone (what the host offers is found
        once per process)."""
        reason = sandbox.sandbox_unavailable()
        return f"{cls.name} cannot run on this server: {reason}." if reason else ""

    def run(self, params: RunParams, ctx: ToolContext) -> str | ToolResult:
        if ctx.replayed is not None:  # a replay never runs a command again
            recorded = ctx.replayed(self.name, ctx.tool_use_id, writes_files=True)
            team_note(ctx, params.command, recorded.text)
            return recorded
        root = workspace.workspace_root(ctx.team)
        before = changes.snapshot(root)
        result = sandbox.sandbox_run(
            directory=root,
            command=params.command,
            timeout_seconds=params.timeout_seconds,
            output_chars=OUTPUT_CHARS,
        )
        found = changes.command_changes_record(
            team=ctx.team, agent=ctx.agent, turn=ctx.turn, root=root, before=before
        )
        text = report(result, found)
        team_note(ctx, params.command, text)
        return ToolResult(text, is_error=False)

    @classmethod
    def digest(cls, params: RunParams, result: ToolResult) -> str:
        first = result.text.split("\n", 2)
        status = first[1] if len(first) > 1 else result.text
        command = " ".join(params.command.split())
        command = command if len(command) <= 80 else command[:79] + "…"
        return f"You ran `{command}`: {status}."


def team_note(ctx: ToolContext, command: str, text: str) -> Message | None:
    """Post the command's one line to the team conversation, read from its result as the
    model reads it (so a replay, answered from the record, posts the same line)."""
    lines = truncate(text, RunCommand.result_limit).split("\n")
    if len(lines) < 2 or not lines[0].startswith("$ "):
        return None  # not a report (a replay without a record): nothing ran
    output = [
        line.strip()
        for line in lines[2:]
        if line.strip() and line not in REPORT_LINES and not line.startswith(REPORT_PREFIXES)
    ]
    note = f"ran `{_plain(command, NOTE_COMMAND_CHARS)}`: {lines[1]}"
    if output:
        note += f"; last line: {_plain(output[-1], NOTE_LAST_LINE_CHARS)}"
    return services.message_add(
        team=ctx.team,
        content=note,
        kind=Message.Kind.SYSTEM,
        author=ctx.agent,
        turn=ctx.turn,
        phase=ctx.turn.phase if ctx.turn is not None else None,
    )


def _plain(value: str, limit: int) -> str:
    """One line without control characters (a NUL a command printed must not fail the
    row), cut after a word."""
    return _short("".join(c if c.isprintable() else " " for c in value), limit)


def report(result: sandbox.CommandResult, found: changes.CommandChanges) -> str:
    """The result as the model reads it: the command, how it ended, its output, the files."""
    lines = [f"$ {result.command if len(result.command) <= 200 else result.command[:199] + '…'}"]
    lines.append(result.status())
    if result.stdout:
        lines += ["stdout:", result.stdout.rstrip("\n")]
    if result.stderr:
        lines += ["stderr:", result.stderr.rstrip("\n")]
    if not result.stdout and not result.stderr:
        lines.append("(no output)")
    summary = found.summary()
    if summary:
        lines.append(summary)
    return "\n".join(lines)
