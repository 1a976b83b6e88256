"""run_command (tools/commands.py) and file_edit (tools/workspace.py): a coder writes,
runs, reads the failure, edits and runs again through the real anthropic client and the
fake Messages API; who is offered the tools; what a command changes in the workspace is
recorded; file_edit's one-match rule. The hostile cases are test_commands_hostile.py's."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from teams.files import revisions, sandbox, workspace
from teams.models import (
    DEFAULT_PHASES,
    Agent,
    FileRevision,
    Message,
    Team,
    TurnStep,
    WorkspaceFile,
)
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, make_turn, per_agent
from tests.teams.engine.test_requests_questions import of
from tests.tools.test_workspace import in_implementation, quiet, tool_results
from tools import registry

pytestmark = pytest.mark.django_db

MODULE = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def read_after(marker: str, reply):
    """A scripted reply given only once the request holds `marker` (the model read it)."""

    def answer(request):
        assert marker in request.dump, f"the model was not shown {marker!r}"
        return reply

    return answer


@pytest.mark.usefixtures("sandbox_ready")
def test_a_coder_runs_pytest_reads_the_failure_fixes_it_and_sees_it_pass(team, messages_api):
    in_implementation(team)
    coder_script = [
        tool("file_write", {"path": "calc.py", "content": MODULE}, "toolu_module"),
        tool("file_write", {"path": "test_calc.py", "content": TESTS}, "toolu_tests"),
        tool("run_command", {"command": "python -m pytest -q"}, "toolu_run1"),
        read_after(
            "assert -1 == 5",
            tool(
                "file_edit",
                {"path": "calc.py", "old_text": "a - b", "new_text": "a + b"},
                "toolu_fix",
            ),
        ),
        tool("run_command", {"command": "python -m pytest -q"}, "toolu_run2"),
        read_after("1 passed", text("Fixed add; the test passes.")),
    ]
    api = messages_api(per_agent({"coach": quiet(), "researcher": quiet(), "coder": coder_script}))
    team_actions.team_start(team=team)
    drain(team, limit=3)
    results = tool_results(api)
    first, is_error = results["toolu_run1"]
    assert not is_error
    assert first.startswith("$ python -m pytest -q\nexit code 1 after ")
    assert "1 failed" in first and "assert -1 == 5" in first
    assert results["toolu_fix"] == (
        "Edited calc.py (32 bytes, write 2 of this file). 3 of 20 writes used this turn.",
        False,
    )
    second = results["toolu_run2"][0]
    assert second.startswith("$ python -m pytest -q\nexit code 0 after ")
    assert "1 passed" in second
    # The revisions show each change with its turn; pytest's cache is not the team's work.
    history = revisions.file_history(team, "calc.py")
    assert [(r.number, r.agent.name, r.turn.number) for r in history] == [
        (2, "coder", 3),
        (1, "coder", 3),
    ]
    assert revisions.revision_get(team, "calc.py", 2).text == MODULE.replace("a - b", "a + b")
    assert not FileRevision.objects.filter(path__startswith=".pytest_cache").exists()
    coder_requests = [r for r in api.requests if r.agent == "coder"]
    assert "run_command" in coder_requests[0].tool_names
    assert "file_edit" in coder_requests[0].tool_names


def request_text(request) -> str:
    """Every text a request's messages carry, tool results included, real newlines."""
    parts = []
    for message in request.body["messages"]:
        content = message["content"]
        for block in [{"text": content}] if isinstance(content, str) else content:
            parts.append(str(block.get("text", block.get("content", ""))))
    return "\n\n".join(parts)


@pytest.mark.usefixtures("sandbox_ready")
def test_teammates_read_one_line_of_each_command_and_the_runner_reads_its_result(
    team, messages_api
):
    in_implementation(team)
    api = messages_api(
        per_agent(
            {
                "coach": quiet(2),
                "researcher": quiet(2),
                "coder": [
                    tool(
                        "file_write",
                        {"path": "test_ok.py", "content": "def test_ok():\n    pass\n"},
                    ),
                    tool(
                        "run_command", {"command": "python -m pytest -q  test_ok.py"}, "toolu_run"
                    ),
                    text("The test passes."),
                    text("Nothing more."),
                ],
                "reviewer": quiet(2),
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=7)
    line = next(
        part
        for part in request_text(of(api, "reviewer")[0]).split("\n\n")
        if part.startswith("[Loom] coder: ran ")
    )
    assert re.fullmatch(
        r"\[Loom\] coder: ran `python -m pytest -q test_ok.py`: exit code 0 after \d+\.\d s; "
        r"last line: 1 passed in \d+\.\d+s",
        line,
    ), line
    assert line in request_text(of(api, "coach")[1])  # the coach has the evidence too
    # The runner read the whole result; its later requests carry its own record, once.
    later = request_text(of(api, "coder")[3])  # its next turn
    assert "[Loom] coder: ran" not in later
    assert later.count("You ran `python -m pytest -q test_ok.py`: exit code 0") == 1


@pytest.mark.usefixtures("sandbox_ready")
def test_run_command_is_offered_to_coders_reviewers_and_testers_in_work_phases(team, agents):
    tool_class = registry.get("run_command")
    assert team.phase == DEFAULT_PHASES[0]  # refinement: talk only
    assert not tool_class.available_to(agents["coder"], team)
    in_implementation(team)
    offered = {name for name, agent in agents.items() if tool_class.available_to(agent, team)}
    assert offered == {"coder", "reviewer"}
    Team.objects.filter(pk=team.pk).update(phase_index=DEFAULT_PHASES.index("code-review"))
    team.refresh_from_db()
    assert tool_class.available_to(agents["reviewer"], team)
    assert tool_class.unavailable_reason(agents["researcher"], team) == (
        "run_command is only for the coder and reviewer and tester role; researcher is a "
        "researcher."
    )


def test_run_command_is_not_offered_where_no_sandbox_runs(team, agents, monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    sandbox.forget()
    in_implementation(team)
    reason = registry.get("run_command").refusal(team)
    assert reason.startswith("run_command cannot run on this server: no bwrap")
    assert "run_command" not in [t.name for t in registry.toolset(agents["coder"], team)]
    sandbox.forget()


@pytest.mark.usefixtures("sandbox_ready")
def test_what_a_command_changes_is_recorded_as_revisions_of_its_turn(team, agents, ctx_for):
    in_implementation(team)
    coder = agents["coder"]
    for path in ("keep.txt", "gone.txt"):
        workspace.file_write(
            team=team, agent=coder, turn=None, path=path, content="v1\n", writes_this_turn=0
        )
    ctx = ctx_for("coder")
    ctx.turn = make_turn(coder, status="running", number=5)
    command = "echo v2 > keep.txt; rm gone.txt; mkdir -p out; echo new > out/new.txt; touch x"
    result = registry.execute("run_command", {"command": command}, ctx)
    assert not result.is_error, result.text
    assert "Created: out/new.txt, x.\nChanged: keep.txt.\nDeleted: gone.txt." in result.text
    # What a fork takes as of now: the deleted file is not among them.
    latest = revisions.revisions_as_of(team, until=timezone.now())
    assert sorted(latest) == ["keep.txt", "out/new.txt", "x"]
    assert bytes(latest["keep.txt"].blob.content) == b"v2\n"
    assert latest["keep.txt"].turn == ctx.turn and latest["keep.txt"].note == "written by a command"
    deletion = revisions.file_history(team, "gone.txt")[0]
    assert (deletion.deleted, deletion.number, deletion.turn) == (True, 2, ctx.turn)
    assert not WorkspaceFile.objects.filter(team=team, path="gone.txt").exists()
    assert Agent.objects.get(pk=coder.pk).files_touched == [
        "keep.txt",
        "gone.txt",
        "out/new.txt",
        "x",
    ]


# --- file_edit -----------------------------------------------------------------------


@pytest.fixture
def with_file(team, agents):
    in_implementation(team)
    workspace.file_write(
        team=team, agent=agents["coder"], turn=None, path="notes.md",
        content="alpha\nbeta\nalpha\ngamma\n", writes_this_turn=0,
    )  # fmt: skip
    return workspace.workspace_root(team) / "notes.md"


def test_file_edit_replaces_the_one_occurrence_and_records_a_revision(with_file, ctx_for, team):
    result = registry.execute(
        "file_edit", {"path": "notes.md", "old_text": "beta\n", "new_text": "BETA\n"},
        ctx_for("coder"),
    )  # fmt: skip
    assert result.text == "Edited notes.md (23 bytes, write 2 of this file)."
    assert with_file.read_text() == "alpha\nBETA\nalpha\ngamma\n"
    assert [r.number for r in revisions.file_history(team, "notes.md")] == [2, 1]


@pytest.mark.parametrize(
    "old_text, said",
    [
        ("alpha\n", "Error: old_text occurs 2 times in 'notes.md': nothing changed. Include "
         "more of the surrounding lines so that it matches exactly once."),
        ("delta", "Error: old_text was not found in 'notes.md' (0 matches): nothing changed. "
         "Read the file again and copy the text exactly, spaces and line breaks included."),
    ],
)  # fmt: skip
def test_file_edit_with_no_match_or_several_changes_nothing(
    old_text, said, with_file, ctx_for, team
):
    result = registry.execute(
        "file_edit", {"path": "notes.md", "old_text": old_text, "new_text": "x"},
        ctx_for("coder"),
    )  # fmt: skip
    assert (result.text, result.is_error) == (said, True)
    assert with_file.read_text() == "alpha\nbeta\nalpha\ngamma\n"
    assert [r.number for r in revisions.file_history(team, "notes.md")] == [1]


def test_file_edit_has_file_write_s_roles_and_leaving_is_a_violation(with_file, ctx_for, agents):
    refused = registry.execute(
        "file_edit", {"path": "../x", "old_text": "a", "new_text": "b"}, ctx_for("coder")
    )
    assert refused.is_error and "recorded as a violation" in refused.text
    assert Agent.objects.get(pk=agents["coder"].pk).violations == 1
    tool_class = registry.get("file_edit")
    team = agents["coder"].team
    assert not tool_class.available_to(agents["researcher"], team)
    assert tool_class.available_to(agents["coder"], team)


@pytest.mark.usefixtures("sandbox_ready")
def test_a_replay_answers_run_command_from_the_record_and_runs_nothing(messages_api, monkeypatch):
    from teams.engine import replay
    from teams.models import Replay
    from tests.helpers import make_team

    team = make_team("gamma", phases=["implementation", "review"])
    command = "echo built > out.txt; echo ran"
    api = messages_api(
        per_agent(
            {
                "coach": quiet(),
                "researcher": quiet(),
                "coder": [tool("run_command", {"command": command}, "toolu_run"), text("Done.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=3)
    recorded = tool_results(api)["toolu_run"][0]
    assert "ran" in recorded and "Created: out.txt." in recorded
    calls = len(api.requests)

    def never(**kwargs):
        raise AssertionError("a replay ran a command")

    monkeypatch.setattr(sandbox, "sandbox_run", never)
    row = replay.team_replay(team=team, until_turn=3)
    assert row.status == Replay.Status.STOPPED, row.reason + row.diff
    assert len(api.requests) == calls
    copy = row.team
    assert (workspace.workspace_root(copy) / "out.txt").read_text() == "built\n"
    made = revisions.file_history(copy, "out.txt")[0]
    assert (made.note, made.turn.number) == ("written by a command", 3)
    step = TurnStep.objects.get(turn__team=copy, turn__number=3, tool_name="run_command")
    assert step.content[0]["content"] == recorded
    # The copy's teammates read the same line of the command as the original's.
    status = recorded.split("\n")[1]  # "exit code 0 after 0.1 s"
    said = [(f"ran `{command}`: {status}; last line: ran",)]
    for each in (team, copy):
        rows = Message.objects.filter(team=each, kind=Message.Kind.SYSTEM)
        assert list(rows.values_list("content")) == said
