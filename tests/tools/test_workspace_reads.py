"""file_read says when a file changed since this agent last read it, and who changed it
(tools/workspace.py), through the agent loop: the real anthropic client and the fake
Messages API."""

from __future__ import annotations

import pytest

from teams.files import workspace
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tests.tools.test_workspace import in_implementation, quiet, tool_results

pytestmark = pytest.mark.django_db


def read(call_id: str, path: str = "notes.md"):
    return tool("file_read", {"path": path}, call_id)


def test_a_read_names_who_changed_the_file_since_the_readers_last_read(team, messages_api):
    in_implementation(team)
    edit = {"path": "notes.md", "old_text": "draft", "new_text": "final"}
    api = messages_api(
        per_agent(
            {
                "coach": quiet(2),
                "researcher": quiet(2),
                "coder": [  # turns 3 and 7
                    tool("file_write", {"path": "notes.md", "content": "draft\n"}, "toolu_w"),
                    text("Wrote the notes."),
                    tool("file_edit", edit, "toolu_e"),
                    text("Edited the notes."),
                ],
                "reviewer": [  # turns 4 and 8
                    read("toolu_first"),
                    read("toolu_again"),
                    text("Read them."),
                    read("toolu_after_edit"),
                    tool("file_edit", {**edit, "old_text": "final", "new_text": "done"}, "toolu_o"),
                    read("toolu_after_own"),
                    text("Read them again."),
                ],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=8)
    results = tool_results(api)
    # Never read before, and unchanged since the last read: no note.
    assert results["toolu_first"] == ("notes.md (6 bytes), lines 1-1 of 1:\ndraft", False)
    assert results["toolu_again"] == results["toolu_first"]
    assert results["toolu_after_edit"] == (
        # No turn numbers: the agent sees none in its requests.
        "notes.md (6 bytes; changed by coder since you last read it), lines 1-1 of 1:\nfinal",
        False,
    )
    assert results["toolu_after_own"] == (
        "notes.md (5 bytes; changed by you since you last read it earlier in this turn), "
        "lines 1-1 of 1:\ndone",
        False,
    )
    assert (workspace.workspace_root(team) / "notes.md").read_text() == "done\n"


def test_another_files_read_and_a_failed_read_do_not_count(team, messages_api):
    in_implementation(team)
    root = workspace.workspace_root(team)
    (root / "notes.md").write_text("one\n")
    (root / "other.md").write_text("two\n")
    api = messages_api(
        per_agent(
            {
                "coach": quiet(2),
                "researcher": [  # turns 2 and 6
                    read("toolu_missing", "notes.txt"),
                    read("toolu_other", "other.md"),
                    text("Looked."),
                    read("toolu_read"),
                    text("Read it."),
                ],
                "coder": [
                    tool("file_write", {"path": "notes.md", "content": "one!\n"}, "toolu_w"),
                    text("Changed it."),
                ],
                "reviewer": quiet(),
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=6)
    results = tool_results(api)
    assert results["toolu_missing"][1] is True
    # The researcher never read notes.md: the coder's write is no change to it.
    assert results["toolu_read"] == ("notes.md (5 bytes), lines 1-1 of 1:\none!", False)
