"""/api/teams/{team}/mcp-servers: the contract (paths, fields, status codes), who may
add what (stdio: superusers only), and that variable values never show."""

import sys
from pathlib import Path

import pytest

from teams.models import McpServer
from teams.run import team_actions
from tests.fakes.messages_api import text
from tests.helpers import FAKE_MCP_COMMAND, ApiClient, api_token, drain, make_mcp_server

pytestmark = pytest.mark.django_db

BASE = "/teams/alpha/mcp-servers"
SECRET = "header-secret-value-77"
HTTP_SERVER = {
    "name": "docs",
    "transport": "http",
    "url": "https://mcp.example.test/mcp",
    "roles": ["coder"],
    "approval": "auto",
    "tool_approvals": {"delete_page": "never"},
}


@pytest.fixture
def pm_api(pm):
    """The PM of alpha, with an account token (a person, not a superuser)."""
    return ApiClient(api_token(user=pm, label="alice's scripts"))


@pytest.fixture(autouse=True)
def quick(settings, loopback_allowed):
    """Short timeouts; URLs may lead to loopback (the fake servers listen there)."""
    settings.LOOM_MCP_TIMEOUT = 8


def test_a_pm_adds_an_http_server_but_names_no_host_variables(pm_api, root_api):
    """Header values come from the Loom host's environment: a PM naming
    AWS_SECRET_ACCESS_KEY would send it to a URL of their choosing."""
    headers = {"Authorization": "DOCS_MCP_TOKEN"}
    refused = pm_api.post(BASE, {**HTTP_SERVER, "header_vars": headers})
    assert refused.status_code == 403 and "Only a superuser" in refused.json()["detail"]
    assert pm_api.post(BASE, HTTP_SERVER).status_code == 201
    changed = pm_api.patch(f"{BASE}/docs", {"header_vars": {"X-Key": "AWS_SECRET_ACCESS_KEY"}})
    assert changed.status_code == 403
    assert McpServer.objects.get(name="docs").header_vars == {}
    assert root_api.patch(f"{BASE}/docs", {"header_vars": {"X-Key": "DOCS_KEY"}}).status_code == 200


def test_a_pm_adds_an_http_server_and_gets_every_field(pm_api):
    created = pm_api.post(BASE, HTTP_SERVER)
    assert created.status_code == 201, created.content
    body = created.json()
    assert {k: body[k] for k in HTTP_SERVER} == HTTP_SERVER
    assert body["command"] == [] and body["env_vars"] == [] and body["phases"] == []
    assert body["tools"] == [] and body["listed_at"] is None
    assert body["healthy"] is True and body["error"] == "" and body["error_at"] is None
    assert [s["name"] for s in pm_api.get(BASE).json()] == ["docs"]
    assert pm_api.get(f"{BASE}/docs").json()["url"] == HTTP_SERVER["url"]


def test_approval_defaults_to_ask(pm_api):
    body = pm_api.post(BASE, {"name": "d", "transport": "http", "url": "http://127.0.0.1:9/"})
    assert body.json()["approval"] == "ask"


def test_a_pm_cannot_add_or_change_a_stdio_server(pm_api, team):
    refused = pm_api.post(BASE, {"name": "box", "transport": "stdio", "command": ["ls"]})
    assert refused.status_code == 403 and "superuser" in refused.json()["detail"]
    assert not McpServer.objects.filter(name="box").exists()
    make_mcp_server(team, name="box")
    changed = pm_api.patch(f"{BASE}/box", {"command": ["rm", "-rf", "/"]})
    assert changed.status_code == 403
    assert McpServer.objects.get(name="box").command == FAKE_MCP_COMMAND
    # Turning an HTTP server into a stdio one is adding a command, too.
    pm_api.post(BASE, HTTP_SERVER)
    assert (
        pm_api.patch(f"{BASE}/docs", {"transport": "stdio", "command": ["sh"]}).status_code == 403
    )
    # What it runs stays the superuser's; its approvals are the PM's.
    ok = pm_api.patch(f"{BASE}/box", {"approval": "never", "roles": ["tester"]})
    assert ok.status_code == 200 and ok.json()["approval"] == "never"


def test_a_superuser_adds_a_stdio_server_and_refreshes_its_tools(team, root_api, monkeypatch):
    monkeypatch.setenv("FAKE_MCP_TOKEN", SECRET)
    created = root_api.post(
        BASE,
        {
            "name": "fake",
            "transport": "stdio",
            "command": FAKE_MCP_COMMAND,
            "env_vars": ["FAKE_MCP_TOKEN"],
            "tool_approvals": {"add": "auto"},
        },
    )
    assert created.status_code == 201, created.content
    refreshed = root_api.post(f"{BASE}/fake/refresh")
    assert refreshed.status_code == 200
    body = refreshed.json()
    tools = {t["name"]: t for t in body["tools"]}
    assert tools["add"] == {
        "name": "add",
        "description": "Add two integers.",
        "policy": "auto",
        "problem": None,
    }
    assert tools["echo"]["policy"] == "ask"
    assert "invalid" in tools["broken"]["problem"]
    assert body["healthy"] and body["listed_at"]
    assert SECRET not in refreshed.content.decode()
    assert SECRET not in root_api.get(BASE).content.decode()


def test_a_failing_server_is_answered_unhealthy_with_the_reason(pm_api):
    pm_api.post(BASE, {"name": "gone", "transport": "http", "url": "http://127.0.0.1:9/mcp"})
    body = pm_api.post(f"{BASE}/gone/refresh").json()
    assert body["healthy"] is False and "'gone'" in body["error"] and body["error_at"]


def test_update_changes_only_the_fields_given_and_delete_removes(pm_api):
    pm_api.post(BASE, HTTP_SERVER)
    body = pm_api.patch(f"{BASE}/docs", {"phases": ["implementation"]}).json()
    assert body["phases"] == ["implementation"] and body["roles"] == ["coder"]
    assert pm_api.delete(f"{BASE}/docs").status_code == 204
    assert pm_api.get(f"{BASE}/docs").status_code == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "Bad Name", "transport": "http", "url": "http://x.test"}, "name"),
        ({"name": "a", "transport": "ftp", "url": "http://x.test"}, "transport"),
        ({"name": "a", "transport": "http", "url": "ftp://x.test"}, "url"),
        ({"name": "a", "transport": "http"}, "url"),
        ({"name": "a", "transport": "http", "url": "http://x.test", "roles": ["king"]}, "roles"),
        ({"name": "a", "transport": "http", "url": "http://x.test", "phases": ["x"]}, "phases"),
        ({"name": "a", "transport": "http", "url": "http://x.test", "approval": "yes"}, "approval"),
        (
            {
                "name": "a",
                "transport": "http",
                "url": "http://x.test",
                "tool_approvals": {"t": "y"},
            },
            "tool_approvals",
        ),
        ({"name": "a", "transport": "http", "url": "http://x.test", "surprise": 1}, "surprise"),
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_nothing_is_made(pm_api, body, field):
    response = pm_api.post(BASE, body)
    assert response.status_code == 422, response.content
    assert field in str(response.json()["detail"])
    assert not McpServer.objects.exists()


def test_a_stdio_server_needs_a_command_even_for_a_superuser(team, root_api):
    for command in ([], [""], "ls"):
        response = root_api.post(BASE, {"name": "x", "transport": "stdio", "command": command})
        assert response.status_code == 422
    env = root_api.post(
        BASE,
        {"name": "x", "transport": "stdio", "command": ["ls"], "env_vars": ["DJANGO_SECRET"]},
    )
    assert env.status_code == 422 and "Loom's own settings" in str(env.json()["detail"])


def test_a_duplicate_name_is_a_409(pm_api):
    pm_api.post(BASE, HTTP_SERVER)
    assert pm_api.post(BASE, HTTP_SERVER).status_code == 409


def test_access_like_the_other_team_routers(team, beta_api, coder_api, api, pm_api):
    make_mcp_server(team)
    for path in (BASE, f"{BASE}/fake"):
        assert beta_api.get(path).status_code == 404
    assert beta_api.post(f"{BASE}/fake/refresh").status_code == 404
    assert pm_api.get(f"{BASE}/nope").status_code == 404
    # An agent's token may not manage servers.
    assert coder_api.get(BASE).status_code == 403
    assert coder_api.post(BASE, HTTP_SERVER).status_code == 403
    assert coder_api.delete(f"{BASE}/fake").status_code == 403
    # A team token reads them, but adding one (header values go to its URL) takes a person.
    assert api.get(BASE).status_code == 200
    assert api.post(BASE, HTTP_SERVER).status_code == 403
    assert ApiClient().get(BASE).status_code == 401


def test_a_stdio_server_added_lists_its_tools_at_once_and_the_next_turn_offers_them(
    team, root_api, messages_api
):
    """Issue 37: the POST's answer lists the tools, and the team's next turn offers them
    with no refresh."""
    api = messages_api(lambda request: text("Noted."))
    created = root_api.post(
        BASE,
        {"name": "fake", "transport": "stdio", "command": FAKE_MCP_COMMAND, "approval": "auto"},
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert {"add", "echo"} <= {t["name"] for t in body["tools"]}
    assert body["healthy"] and body["listed_at"]

    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert {"fake__add", "fake__echo"} <= set(api.requests[0].tool_names)


def test_a_server_added_without_its_tools_is_listed_when_the_next_turn_begins(team, messages_api):
    """Added by a script (or `team mcp add --no-refresh`): the turn lists it first."""
    api = messages_api(lambda request: text("Noted."))
    server = make_mcp_server(team, approval="auto")
    assert server.listed_at is None
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert "fake__echo" in api.requests[0].tool_names
    server.refresh_from_db()
    assert server.listed_at is not None


def test_a_pm_sees_the_demos_command_without_the_hosts_paths(team, pm_api, root_api):
    """Issue 33, finding 8: the demo's command runs the host's virtualenv Python; a PM
    is shown `python -m teams.engine.mcp_demo_server`, a superuser the whole command."""
    from teams.engine import mcp_demo_server

    server = mcp_demo_server.register(team)
    program = Path(sys.executable).name
    listed = pm_api.get(BASE)
    one = pm_api.get(f"{BASE}/demo")
    for response in (listed, one):
        assert str(Path(sys.executable).parent) not in response.content.decode()
    assert one.json()["command"] == [program, "-m", "teams.engine.mcp_demo_server"]
    assert listed.json()[0]["command"] == one.json()["command"]
    changed = pm_api.patch(f"{BASE}/demo", {"approval": "never"})
    assert changed.json()["command"] == one.json()["command"]
    assert root_api.get(f"{BASE}/demo").json()["command"] == [
        sys.executable,
        "-m",
        "teams.engine.mcp_demo_server",
    ]
    server.refresh_from_db()  # what runs keeps the host's path
    assert server.command == [sys.executable, "-m", "teams.engine.mcp_demo_server"]
