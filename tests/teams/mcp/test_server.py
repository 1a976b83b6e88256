"""Loom as an MCP server, in process: the official MCP client talks Streamable HTTP
to the site's ASGI application (loomsite.asgi) with the API's tokens. What a PM does
from Claude (list, answer, drive teams), what an agent-bound token sees (the agent's
seat), and what is refused: another team (as if missing), no token, a revoked one,
writes with a read-only token."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest
from django.utils import timezone
from mcp import MCPError

from teams.conversation import pm_requests
from teams.models import ApiToken, Message, PMRequest, Team
from teams.run import team_actions
from tests.helpers import ApiClient, api_token, make_mcp_server, make_user
from tests.teams.mcp.conftest import (
    IN_PROCESS_URL,
    PM_TOOLS,
    http_client,
    mcp_session,
    text_of,
)

pytestmark = pytest.mark.django_db(transaction=True)

READING_PM_TOOLS = {"list_teams", "team_status", "list_pm_requests"}


@pytest.fixture
def waiting(team, agents):
    """Alpha running, then waiting for the PM: the coach's open question."""
    team_actions.team_start(team=team)
    return pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Which database?")


@pytest.fixture
def alpha_key(team):
    return api_token(team=team, label="claude desktop")


def read_only(key: str) -> str:
    ApiToken.objects.filter(key_hash=ApiToken.hash_key(key)).update(read_only=True)
    return key


def listed_tools(key: str) -> dict:
    async def listing():
        async with mcp_session(key) as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    return asyncio.run(listing())


def tool_names(key: str) -> set[str]:
    return set(listed_tools(key))


def call(key: str, name: str, arguments: dict | None = None, *, mode="auto"):
    """One tool call from a fresh client, as a program makes it (the test's own
    thread stays synchronous, so it reads the database directly)."""

    async def calling():
        async with mcp_session(key, mode=mode) as client:
            return await client.call_tool(name, arguments or {})

    return asyncio.run(calling())


def status_of(team) -> str:
    return Team.objects.get(pk=team.pk).status


# --- a PM's seat -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_pm_answers_an_open_question_and_the_team_resumes(alpha_key, waiting, mode):
    """Both protocol eras (a 2026 client's discover, today's initialize handshake)."""
    assert tool_names(alpha_key) == PM_TOOLS
    listed = call(alpha_key, "list_pm_requests", mode=mode)
    assert [r["id"] for r in listed.structured_content["requests"]] == [waiting.id]
    assert listed.structured_content["requests"][0]["question"] == "Which database?"
    assert status_of(waiting.team) == Team.Status.AWAITING_PM

    result = call(
        alpha_key,
        "answer_pm_request",
        {"team": "alpha", "request_id": waiting.id, "answer": "PostgreSQL 16", "pin_as": "db"},
        mode=mode,
    )

    assert not result.is_error, text_of(result)
    assert status_of(waiting.team) == Team.Status.RUNNING
    assert result.structured_content["team"]["status"] == Team.Status.RUNNING
    request = PMRequest.objects.get(pk=waiting.id)
    assert (request.status, request.answer) == ("answered", "PostgreSQL 16")
    assert waiting.team.anchors.get(key="db").value == "PostgreSQL 16"
    assert Message.objects.filter(team=waiting.team, kind="pm", content="PostgreSQL 16").exists()


def test_an_answered_request_is_refused_with_the_apis_message(alpha_key, waiting):
    first = call(
        alpha_key, "answer_pm_request", {"team": "alpha", "request_id": waiting.id, "answer": "A"}
    )
    again = call(
        alpha_key, "answer_pm_request", {"team": "alpha", "request_id": waiting.id, "answer": "B"}
    )
    assert not first.is_error
    api = ApiClient(alpha_key).post(
        f"/teams/alpha/pm-requests/{waiting.id}/answer", {"answer": "C"}
    )
    assert api.status_code == 409
    assert again.is_error and text_of(again) == api.json()["detail"]
    assert PMRequest.objects.get(pk=waiting.id).answer == "A"


def test_team_status_posting_and_the_lifecycle(alpha_key, team):
    started = call(alpha_key, "start_team", {"team": "alpha"})
    assert not started.is_error and text_of(started).startswith("Team 'alpha' started.")
    assert status_of(team) == Team.Status.RUNNING

    posted = call(alpha_key, "post_message", {"team": "alpha", "content": "Use SQLite."})
    assert posted.structured_content["kind"] == "pm"

    status = call(alpha_key, "team_status", {"team": "alpha"})
    assert status.structured_content["status"] == Team.Status.RUNNING
    assert status.structured_content["recent_messages"][-1]["content"] == "Use SQLite."

    paused = call(alpha_key, "pause_team", {"team": "alpha"})
    assert paused.structured_content["status"] == status_of(team) == Team.Status.PAUSED
    resumed = call(alpha_key, "resume_team", {"team": "alpha"})
    assert resumed.structured_content["status"] == status_of(team) == Team.Status.RUNNING

    # A change the status does not allow: the API's 409 text, nothing changed.
    again = call(alpha_key, "start_team", {"team": "alpha"})
    api = ApiClient(alpha_key).post("/teams/alpha/start")
    assert api.status_code == 409
    assert again.is_error and text_of(again) == api.json()["detail"]
    assert status_of(team) == Team.Status.RUNNING


def test_bad_input_is_a_tool_error_and_changes_nothing(alpha_key, waiting):
    blank = call(
        alpha_key, "answer_pm_request", {"team": "alpha", "request_id": waiting.id, "answer": " "}
    )
    assert blank.is_error and text_of(blank) == "The answer is empty."
    missing = call(
        alpha_key, "answer_pm_request", {"team": "alpha", "request_id": 999999, "answer": "x"}
    )
    assert missing.is_error and text_of(missing) == "Team 'alpha' has no PM request 999999."
    untyped = call(alpha_key, "answer_pm_request", {"team": "alpha", "answer": "x"})
    assert untyped.is_error and "request_id" in text_of(untyped)
    assert PMRequest.objects.get(pk=waiting.id).status == "open"
    assert status_of(waiting.team) == Team.Status.AWAITING_PM


# --- scope: another team is not found -----------------------------------------------


def test_another_team_is_as_missing_as_one_that_does_not_exist(alpha_key, other_team):
    theirs = pm_requests.pm_request_open(team=other_team, question="Theirs?")
    for name in ("team_status", "start_team", "post_message"):
        arguments = {"team": "beta"} | ({"content": "hi"} if name == "post_message" else {})
        beta = call(alpha_key, name, arguments)
        nobody = call(alpha_key, name, {**arguments, "team": "gamma"})
        assert beta.is_error and nobody.is_error
        assert text_of(beta) == "No team with slug 'beta'."
        assert text_of(nobody) == "No team with slug 'gamma'."
    # Their request is neither listed nor answerable through alpha's slug.
    listed = call(alpha_key, "list_pm_requests", {"status": None})
    assert theirs.id not in [r["id"] for r in listed.structured_content["requests"]]
    answer = call(
        alpha_key, "answer_pm_request", {"team": "alpha", "request_id": theirs.id, "answer": "x"}
    )
    assert text_of(answer) == f"Team 'alpha' has no PM request {theirs.id}."
    teams = call(alpha_key, "list_teams")
    assert [t["team"] for t in teams.structured_content["teams"]] == ["alpha"]
    assert PMRequest.objects.get(pk=theirs.id).status == "open"
    assert Team.objects.get(slug="beta").status == other_team.status


def test_an_account_token_reaches_its_users_teams_only(team, other_team, waiting):
    alice = make_user("alice", manages=[team])
    key = api_token(user=alice, label="alice's claude")
    pm_requests.pm_request_open(team=other_team, question="Theirs?")
    listed = call(key, "list_pm_requests")
    assert [r["team"] for r in listed.structured_content["requests"]] == ["alpha"]
    beta = call(key, "team_status", {"team": "beta"})
    assert text_of(beta) == "No team with slug 'beta'."
    answered = call(
        key, "answer_pm_request", {"team": "alpha", "request_id": waiting.id, "answer": "Yes"}
    )
    assert not answered.is_error
    assert PMRequest.objects.get(pk=waiting.id).answered_by == alice


# --- who may connect -------------------------------------------------------------------


def post_initialize(key: str | None, host: str = "localhost") -> httpx2.Response:
    return asyncio.run(post(key, INITIALIZE, {"Host": host}))


async def post(key: str | None, body: dict, headers: dict) -> httpx2.Response:
    from loomsite.asgi import application

    async with http_client(key, app=application) as http:
        return await http.post(
            IN_PROCESS_URL,
            json=body,
            headers={"Accept": "application/json, text/event-stream", **headers},
        )


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


def test_no_token_a_wrong_one_or_a_revoked_one_is_a_401(team, alpha_key):
    revoked = api_token(team=team, label="old laptop")
    ApiToken.objects.filter(key_hash=ApiToken.hash_key(revoked)).update(revoked_at=timezone.now())
    assert post_initialize(alpha_key).status_code == 200
    unknown = (
        "Authentication required: send Authorization: Bearer <token> with a live token "
        "(this one is unknown or revoked)."
    )
    for key, detail in (
        (None, "Authentication required: send Authorization: Bearer <token>."),
        ("loom_not-a-token", unknown),
        (revoked, unknown),
    ):
        response = post_initialize(key)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json() == {"detail": detail}


def test_an_expired_token_is_told_it_expired_as_the_rest_api_does(team):
    """Issue 33, finding 8: /mcp says why a token is refused."""
    from datetime import UTC, datetime

    expired = api_token(team=team, label="last year")
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    ApiToken.objects.filter(key_hash=ApiToken.hash_key(expired)).update(expires_at=when)
    response = post_initialize(expired)
    assert response.status_code == 401
    assert response.json() == {
        "detail": "This token expired at 2025-01-02 03:04:05 UTC; make a new one."
    }


def test_the_mcp_client_gets_the_refusal_as_an_error(team):
    with pytest.raises(BaseException) as raised:
        tool_names("loom_not-a-token")
    leaves = [raised.value]
    while any(isinstance(e, BaseExceptionGroup) for e in leaves):
        leaves = [x for e in leaves for x in getattr(e, "exceptions", [e])]
    assert any(isinstance(e, MCPError) for e in leaves), leaves


def test_a_session_cookie_is_no_way_in(team, client):
    """No cookie auth: a logged-in browser's session does not open /mcp."""
    root = make_user("root", superuser=True)
    client.force_login(root)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    response = asyncio.run(post(None, INITIALIZE, {"Cookie": cookie}))
    assert response.status_code == 401


def test_mcp_requests_count_against_the_callers_api_rate(settings, alpha_key):
    """One budget per token, whichever face it uses: /mcp cannot get round the API's."""
    settings.LOOM_API_RATE = "3/min"
    assert ApiClient(alpha_key).get("/teams").status_code == 200
    assert post_initialize(alpha_key).status_code == 200
    assert post_initialize(alpha_key).status_code == 200
    refused = post_initialize(alpha_key)
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Too many requests."}
    assert int(refused.headers["retry-after"]) > 0
    assert ApiClient(alpha_key).get("/teams").status_code == 429


def test_a_host_outside_allowed_hosts_is_refused(alpha_key):
    response = post_initialize(alpha_key, host="evil.example")
    assert response.status_code == 400
    assert response.json() == {"detail": "Invalid Host header."}


# --- read-only tokens -----------------------------------------------------------------


def test_a_read_only_token_reads_but_cannot_write(team, waiting):
    key = read_only(api_token(team=team, label="dashboard"))
    assert tool_names(key) == READING_PM_TOOLS
    status = call(key, "team_status", {"team": "alpha"})
    assert status.structured_content["open_pm_request"]["id"] == waiting.id
    refused = {
        "answer_pm_request": {"team": "alpha", "request_id": waiting.id, "answer": "Yes"},
        "post_message": {"team": "alpha", "content": "hello"},
        "pause_team": {"team": "alpha"},
        "start_team": {"team": "alpha"},
        "resume_team": {"team": "alpha"},
    }
    for name, arguments in refused.items():
        result = call(key, name, arguments)
        assert result.is_error
        assert text_of(result).startswith("This token is read-only: it cannot ")
    assert PMRequest.objects.get(pk=waiting.id).status == "open"
    assert status_of(team) == Team.Status.AWAITING_PM
    assert not Message.objects.filter(team=team, kind="pm").exists()


# --- an agent's seat --------------------------------------------------------------------


@pytest.fixture
def coder_key(agents):
    return api_token(agent=agents["coder"], label="coder program")


def test_an_agent_token_gets_the_agents_tools_and_read_context(team, agents, coder_key):
    from tools import registry

    names = tool_names(coder_key)
    expected = {tool.name for tool in registry.toolset(agents["coder"], team)}
    assert names == expected | {"read_context"}
    assert not names & PM_TOOLS

    listed = listed_tools(coder_key)
    peer = registry.get("peer_message").definition_for(team)
    assert listed["peer_message"].input_schema == peer["input_schema"]


def test_an_agent_runs_its_tools_and_reads_its_context(team, agents, coder_key):
    sent = call(coder_key, "peer_message", {"to": "reviewer", "content": "PR is up."})
    assert not sent.is_error and text_of(sent) == "Message sent to reviewer."
    assert Message.objects.filter(
        author=agents["coder"], recipient=agents["reviewer"], content="PR is up."
    ).exists()

    context = call(coder_key, "read_context")
    api = ApiClient(coder_key).get("/teams/alpha/agents/coder/context")
    assert context.structured_content == json.loads(json.dumps(api.json()))

    bad = call(coder_key, "peer_message", {"to": "reviewer"})
    assert bad.is_error and text_of(bad).startswith("Error: Invalid arguments for peer_message")


def test_an_agent_token_cannot_act_as_the_pm(coder_key, waiting):
    result = call(
        coder_key, "answer_pm_request", {"team": "alpha", "request_id": waiting.id, "answer": "x"}
    )
    assert result.is_error
    assert PMRequest.objects.get(pk=waiting.id).status == "open"


def test_a_tool_outside_the_agents_role_is_refused_with_the_reason(team, agents, coder_key):
    from tools import registry

    file_write = registry.get("file_write")
    reason = file_write.unavailable_reason(agents["coder"], team)
    assert reason  # not in the coder's toolset in this phase
    result = call(coder_key, "file_write", {"path": "notes.md", "content": "x"})
    assert result.is_error and text_of(result) == reason


def test_a_read_only_agent_token_reads_its_context_only(agents):
    key = read_only(api_token(agent=agents["coder"], label="watcher"))
    assert tool_names(key) == {"read_context"}
    result = call(key, "peer_message", {"to": "reviewer", "content": "hi"})
    assert result.is_error
    assert text_of(result) == "This token is read-only: it cannot run agent tools."
    assert not Message.objects.filter(author=agents["coder"]).exists()
    assert not (call(key, "read_context")).is_error


def test_no_agent_tool_shadows_the_seats_own_tools():
    from teams.mcp.server import SEAT_TOOLS
    from tools import registry

    assert SEAT_TOOLS.isdisjoint(tool.name for tool in registry.all_tools())


def test_an_agent_tokens_list_holds_only_the_tools_it_can_call(team, agents, coder_key):
    """Issue 33, finding 8: the team's MCP tools (`fake__echo`) and a tool that waits for
    the PM's approval are in the agent's turn toolset, but a program in its seat calls
    neither (an approval waits inside a turn): they are not listed, and what is listed
    runs."""
    from teams.integrations import mcp_servers
    from tools import registry

    server = make_mcp_server(team, approval="auto")
    echo = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    mcp_servers.mcp_server_record_tools(
        server=server, tools=[{"name": "echo", "description": "Echo.", "input_schema": echo}]
    )
    Team.objects.filter(pk=team.pk).update(tool_approvals={"file_read": "ask"})
    team.refresh_from_db()
    in_turn = {tool.name for tool in registry.toolset(agents["coder"], team)}
    assert {"fake__echo", "file_read", "peer_message"} <= in_turn

    names = tool_names(coder_key)
    assert "fake__echo" not in names and "file_read" not in names
    assert names == in_turn - {"fake__echo", "file_read"} | {"read_context"}
    sent = call(coder_key, "peer_message", {"to": "reviewer", "content": "PR is up."})
    assert not sent.is_error and text_of(sent) == "Message sent to reviewer."
