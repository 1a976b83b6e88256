"""MCP tools in the agent loop: offered as `<server>__<tool>` with the server's schema
to the right roles and phases, asked for under `ask`, run once, and a server that
misbehaves gives a clear "Error: ..." result while the turn ends normally. The fake
MCP servers (tests/fakes/mcp_stdio.py over stdio, the SDK's in tests/fakes/mcp_servers.py
over HTTP) through the real anthropic client and the fake Messages API."""

import pytest

from teams.conversation import pm_requests
from teams.engine import mcp_client
from teams.models import McpServer, PMRequest, Team, Turn
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, make_mcp_server, per_agent
from tools import registry


@pytest.fixture
def fake(team, settings):
    settings.LOOM_MCP_TIMEOUT = 20  # a deadline: a stdio server starts slowly on a busy machine
    server = make_mcp_server(team, approval="auto")
    return mcp_client.refresh(server)


def _coder_calls(messages_api, name, arguments, call_id="toolu_mcp"):
    return messages_api(
        per_agent(
            {
                "coach": [text("Start."), text("Go on.")],
                "researcher": [text("Noted."), text("Noted again.")],
                "coder": [tool(name, arguments, call_id, say="Let me check."), text("Done.")],
                "reviewer": [text("Fine."), text("Fine again.")],
            }
        )
    )


def _result_read_by_coder(api):
    coder = [r for r in api.requests if r.agent == "coder"]
    return coder[1].body["messages"][-1]["content"][0]


def test_offered_under_its_prefixed_name_with_its_schema(fake, team):
    coder = team.agents.get(name="coder")
    offered = {t.name: t for t in registry.toolset(coder, team)}
    assert "fake__echo" in offered and "fake__broken" not in offered  # invalid schema
    schema = offered["fake__echo"].definition()["input_schema"]
    assert schema["properties"]["text"]["type"] == "string"


def test_only_the_servers_roles_and_phases_get_it(fake, team):
    McpServer.objects.filter(pk=fake.pk).update(roles=["reviewer"], phases=[team.phases[-1]])
    coder, reviewer = team.agents.get(name="coder"), team.agents.get(name="reviewer")
    assert "fake__echo" not in {t.name for t in registry.toolset(reviewer, team)}  # phase
    Team.objects.filter(pk=team.pk).update(phase_index=len(team.phases) - 1)
    team.refresh_from_db()
    assert "fake__echo" in {t.name for t in registry.toolset(reviewer, team)}
    assert "fake__echo" not in {t.name for t in registry.toolset(coder, team)}  # role


def test_a_call_runs_and_its_result_is_the_tool_result(fake, team, messages_api):
    api = _coder_calls(messages_api, "fake__echo", {"text": "hello"})
    team_actions.team_start(team=team)
    drain(team, limit=3)
    result = _result_read_by_coder(api)
    assert "hello" in result["content"] and "is_error" not in result


def test_under_ask_the_pm_approves_and_it_runs_once(fake, team, messages_api):
    McpServer.objects.filter(pk=fake.pk).update(approval="ask")
    api = _coder_calls(messages_api, "fake__pid", {})
    team_actions.team_start(team=team)
    drain(team)
    request = PMRequest.objects.get(team=team, kind=PMRequest.Kind.APPROVAL)
    assert request.tool_name == "fake__pid"
    pm_requests.pm_request_answer(request_id=request.id, answer="Always approve")
    drain(team, limit=3)
    fake.refresh_from_db()
    assert fake.tool_approvals == {"pid": "auto"}
    approved, _, pid = _result_read_by_coder(api)["content"].partition("\n\n")
    # The model reads that the PM approved the call (and its later ones), then its result.
    assert approved == (
        "[The PM approved this call, and later calls of fake__pid will run without asking.]"
    )
    assert pid.strip().isdigit()
    assert len([r for r in api.requests if r.agent == "coder"]) == 2


@pytest.mark.parametrize(
    "name, arguments, expected",
    [
        ("fake__crash", {}, "Error: "),
        ("fake__hang", {"seconds": 30}, "Error: "),
        ("fake__echo", {"text": 5}, "Error: Invalid arguments for fake__echo"),
    ],
)
def test_a_misbehaving_server_gives_an_error_and_the_turn_ends_normally(
    fake, team, messages_api, settings, name, arguments, expected
):
    # The server is started and listed (within the fixture's 20 s): the hanging call
    # needs a deadline of its own, not the start's.
    settings.LOOM_MCP_TIMEOUT = 2
    api = _coder_calls(messages_api, name, arguments)
    team_actions.team_start(team=team)
    drain(team, limit=3)
    result = _result_read_by_coder(api)
    assert result["content"].startswith(expected) and result["is_error"] is True
    turn = Turn.objects.filter(team=team, agent__name="coder").first()
    assert turn.status == Turn.Status.DONE


def test_a_huge_result_is_bounded(fake, team, messages_api):
    api = _coder_calls(messages_api, "fake__huge", {})
    team_actions.team_start(team=team)
    drain(team, limit=3)
    assert len(_result_read_by_coder(api)["content"]) < 10_000


def test_the_tool_list_of_the_api_shows_them_with_their_policy(fake, team):
    from tests.helpers import ApiClient, api_token

    api = ApiClient(api_token(team=team))
    McpServer.objects.filter(pk=fake.pk).update(tool_approvals={"pid": "ask"})
    listed = {t["name"]: t for t in api.get(f"/tools?team={team.slug}").json()}
    assert listed["fake__echo"]["approval"] == "auto"
    assert listed["fake__pid"]["approval"] == "ask"
    assert "fake__broken" not in listed  # its schema is invalid: kept out
    assert listed["fake__echo"]["input_schema"]["properties"]["text"]["type"] == "string"
