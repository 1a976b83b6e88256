"""`manage.py team mcp ...`: list, add (stdio after --, or --http), remove, refresh,
with clear errors; and Loom's demo MCP server."""

import pytest
from django.core.management import CommandError, call_command

from teams.engine import mcp_client, mcp_demo_server
from teams.models import McpServer
from tests.helpers import FAKE_MCP_COMMAND

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quick(settings):
    settings.LOOM_MCP_TIMEOUT = 8


def team_mcp(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command("team", "mcp", *args, stdout=out)
    return out.getvalue()


def test_add_a_stdio_server_lists_its_tools_then_remove_it(team, monkeypatch):
    monkeypatch.setenv("FAKE_MCP_TOKEN", "cmd-secret-999")
    out = team_mcp(
        "add",
        "alpha",
        "fake",
        "--stdio",
        "--env",
        "FAKE_MCP_TOKEN",
        "--approval",
        "auto",
        "--role",
        "coder",
        "--",
        *FAKE_MCP_COMMAND,
    )
    server = McpServer.objects.get(name="fake")
    assert server.command == FAKE_MCP_COMMAND and server.env_vars == ["FAKE_MCP_TOKEN"]
    assert server.roles == ["coder"] and server.approval == "auto"
    assert "- add [auto]" in out and "- broken [not offered: its input schema is invalid" in out
    assert "variables: FAKE_MCP_TOKEN" in out and "cmd-secret-999" not in out
    assert "fake (stdio:" in team_mcp("list", "alpha")
    assert "health: ok" in team_mcp("refresh", "alpha", "fake")
    assert "Removed MCP server fake" in team_mcp("remove", "alpha", "fake")
    assert "has no MCP servers" in team_mcp("list", "alpha")


def test_add_an_http_server_with_headers_from_variables(team):
    team_mcp(
        "add",
        "alpha",
        "docs",
        "--http",
        "https://mcp.example.test/mcp",
        "--header",
        "Authorization=DOCS_TOKEN",
        "--no-refresh",
    )
    server = McpServer.objects.get(name="docs")
    assert server.header_vars == {"Authorization": "DOCS_TOKEN"} and server.approval == "ask"


@pytest.mark.parametrize(
    "args, message",
    [
        (("add", "alpha", "x", "--stdio"), "Give the command after --"),
        (("add", "alpha", "x"), "Say how to reach it"),
        (("add", "alpha", "x", "--http", "https://a.test", "--header", "Auth"), "NAME=VAR"),
        (("add", "alpha", "Bad", "--http", "https://a.test", "--no-refresh"), "server name"),
        (("add", "alpha", "x", "--stdio", "--env", "LOOM_KEY", "--", "ls"), "Loom's own"),
        (("remove", "alpha", "nope"), "has no MCP server 'nope'"),
        (("refresh", "alpha"), "Name the server"),
        (("list", "nope"), "nope"),
    ],
)
def test_clear_errors_and_nothing_made(team, args, message):
    with pytest.raises(CommandError, match=message):
        team_mcp(*args)
    assert not McpServer.objects.exists()


def test_a_server_that_does_not_start_is_added_but_said_to_fail(team):
    with pytest.raises(CommandError, match="no program"):
        team_mcp("add", "alpha", "bad", "--stdio", "--", "/no/such/program-xyz")
    assert not McpServer.objects.get(name="bad").healthy


def test_the_other_team_actions_still_parse(team):
    from io import StringIO

    out = StringIO()
    call_command("team", "status", "alpha", stdout=out)
    assert "team:   alpha" in out.getvalue()


def test_the_demo_server_registers_once_and_its_tools_work(team):
    server = mcp_demo_server.register(team)
    assert mcp_demo_server.register(team) == server
    assert server.approval == "ask" and server.command[1:] == ["-m", mcp_demo_server.MODULE]
    mcp_client.refresh(server)
    assert {t["name"] for t in server.tools} == {"outline", "word_count"}
    text = "# Title\nSome words here.\n## Part\n```\n# not a heading\n```\n"
    assert mcp_client.call_tool(server, "outline", {"text": text}).text == "- Title\n  - Part"
    assert mcp_client.call_tool(server, "word_count", {"text": "a b c"}).text == (
        "3 words, 1 lines, 5 characters"
    )
