"""An agent's working notes on the live view without a browser: a finished turn's text
beside its tool calls under its message, escaped, never a second copy of the message;
and the JSON the live view's script asks for when a turn ends."""

import pytest

from teams import services
from teams.models import TurnStep
from tests.helpers import client_for, make_turn, make_user

NOTE = 'Reading the spec first <script>alert("notes")</script><img src=x onerror=alert(3)>'
FINAL = "The parser handles empty input now."


@pytest.fixture
def manager(pm):
    return client_for(pm)


def tool_use(name: str, n: int) -> dict:
    return {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {}}


def finished_turn(agent, steps: list[list[dict]], said: str):
    """A done turn whose model responses were `steps` (a tool step after each that
    calls a tool), and whose message is `said`."""
    turn = make_turn(agent, number=1, status="done", phase=agent.team.phase)
    index = 0
    for content in steps:
        TurnStep.objects.create(turn=turn, index=index, kind="model", content=content)
        index += 1
        for block in content:
            if block["type"] == "tool_use":
                result = [{"type": "tool_result", "tool_use_id": block["id"], "content": "ok"}]
                TurnStep.objects.create(
                    turn=turn, index=index, kind="tool", tool_name=block["name"], content=result
                )
                index += 1
    services.message_add(team=agent.team, author=agent, content=said, turn=turn)
    return turn


def test_the_live_page_holds_a_finished_turns_working_notes_escaped(manager, team, agents):
    finished_turn(
        agents["coder"],
        [
            [{"type": "text", "text": NOTE}, tool_use("file_read", 1)],
            [{"type": "text", "text": "Then the tests."}, tool_use("file_list", 2)],
            [{"type": "text", "text": FINAL}],
        ],
        said=FINAL,
    )
    page = manager.get("/teams/alpha/").content.decode()
    notes = page.split('<details class="working-notes">', 1)[1].split("</details>", 1)[0]
    assert "<summary>Working notes</summary>" in notes
    assert "Reading the spec first &lt;script&gt;alert(&quot;notes&quot;)&lt;/script&gt;" in notes
    assert "&lt;img src=x onerror=alert(3)&gt;\n\nThen the tests." in notes
    assert "<script>alert(" not in page and "<img src=x" not in page
    assert FINAL not in notes  # the message is said once, in its own card
    assert page.count(FINAL) == 1
    assert page.index(FINAL) < page.index('class="working-notes"')  # under its message


def test_a_turn_ended_by_a_tool_keeps_its_message_out_of_its_notes(manager, team, agents):
    # ask_pm with text beside it: that text is the turn's message, not a note as well.
    asked = "Which format should the report use?"
    finished_turn(
        agents["coach"],
        [
            [{"type": "text", "text": "Checking the anchors."}, tool_use("scan_hierarchy", 1)],
            [{"type": "text", "text": asked}, tool_use("ask_pm", 2)],
        ],
        said=asked,
    )
    page = manager.get("/teams/alpha/").content.decode()
    notes = page.split('<div class="notes-text">', 1)[1].split("</div>", 1)[0]
    assert notes == "Checking the anchors."
    assert page.count(asked) == 1


def test_a_turn_without_tool_calls_has_no_notes(manager, team, agents):
    finished_turn(agents["coder"], [[{"type": "text", "text": FINAL}]], said=FINAL)
    assert "working-notes" not in manager.get("/teams/alpha/").content.decode()


def test_the_notes_json_for_the_live_views_script(manager, team, agents, other_team):
    turn = finished_turn(
        agents["coder"],
        [
            [{"type": "text", "text": NOTE}, tool_use("file_read", 1)],
            [{"type": "text", "text": FINAL}],
        ],
        said=FINAL,
    )
    answer = manager.get(f"/teams/alpha/turns/{turn.id}/notes/").json()
    assert answer == {"turn": turn.id, "notes": NOTE}
    # Another team's page names no turn of this one; a team the PM does not manage is a 404.
    assert client_for(make_user("boss", superuser=True)).get(
        f"/teams/beta/turns/{turn.id}/notes/"
    ).json() == {"turn": turn.id, "notes": ""}
    assert manager.get(f"/teams/beta/turns/{turn.id}/notes/").status_code == 404
