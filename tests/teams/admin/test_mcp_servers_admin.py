"""The admin's MCP servers: a superuser adds a stdio server and lists its tools; a PM
(staff with the PM group's permissions) adds HTTP servers only and sees a stdio
server's command read-only; variable values never show."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from teams.models import McpServer
from teams.pm_group import PM_PERMISSIONS
from tests.helpers import FAKE_MCP_COMMAND, client_for, make_mcp_server

pytestmark = pytest.mark.django_db

ADD = reverse("admin:teams_mcpserver_add")
LIST = reverse("admin:teams_mcpserver_changelist")
SECRET = "admin-page-secret-31337"


def form(team, **fields):
    data = {
        "team": team.pk,
        "name": "docs",
        "transport": "http",
        "command": "[]",
        "env_vars": "[]",
        "url": "https://mcp.example.test/mcp",
        "header_vars": "{}",
        "roles": "[]",
        "phases": "[]",
        "approval": "ask",
        "tool_approvals": "{}",
    }
    return {**data, **fields}


@pytest.fixture
def pm_client(pm):
    pm.user_permissions.set(
        Permission.objects.filter(content_type__app_label="teams", codename__in=PM_PERMISSIONS)
    )
    return client_for(pm)


@pytest.fixture(autouse=True)
def quick(settings):
    settings.LOOM_MCP_TIMEOUT = 8


def test_a_superuser_adds_a_stdio_server_and_lists_its_tools(admin_client, team, monkeypatch):
    import json

    monkeypatch.setenv("FAKE_MCP_TOKEN", SECRET)
    data = form(
        team,
        name="fake",
        transport="stdio",
        command=json.dumps(FAKE_MCP_COMMAND),
        env_vars='["FAKE_MCP_TOKEN"]',
        url="",
        tool_approvals='{"add": "auto"}',
    )
    response = admin_client.post(ADD, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    server = McpServer.objects.get(name="fake")
    assert server.command == FAKE_MCP_COMMAND
    refreshed = admin_client.post(
        LIST, {"action": "refresh", "_selected_action": [server.pk]}, follow=True
    )
    assert "tool(s) listed" in refreshed.content.decode()
    page = admin_client.get(reverse("admin:teams_mcpserver_change", args=[server.pk]))
    text = page.content.decode()
    assert "<td>add</td><td>auto</td>" in text and "<td>echo</td><td>ask</td>" in text
    assert "not offered" in text and "invalid" in text  # the broken schema, with its reason
    assert "healthy" in text
    assert SECRET not in text and SECRET not in admin_client.get(LIST).content.decode()


def test_an_unhealthy_server_shows_why(admin_client, team):
    server = make_mcp_server(team, command=["/no/such/program-xyz"])
    admin_client.post(LIST, {"action": "refresh", "_selected_action": [server.pk]})
    text = admin_client.get(LIST).content.decode()
    assert "unhealthy since" in text and "no program" in text


def test_a_pm_adds_an_http_server_but_not_a_stdio_one(pm_client, team):
    page = pm_client.get(ADD).content.decode()
    assert 'value="http"' in page and 'value="stdio"' not in page
    refused = pm_client.post(ADD, form(team, name="box", transport="stdio"))
    assert refused.status_code == 200  # the form again, with the error
    assert not McpServer.objects.filter(name="box").exists()
    assert pm_client.post(ADD, form(team)).status_code == 302
    assert McpServer.objects.get(name="docs").transport == "http"


def test_a_pm_sees_a_stdio_servers_command_read_only(pm_client, team):
    server = make_mcp_server(team, name="box")
    url = reverse("admin:teams_mcpserver_change", args=[server.pk])
    page = pm_client.get(url).content.decode()
    assert 'name="command"' not in page and "mcp_stdio.py" in page
    data = form(team, name="box", transport="stdio", command='["sh"]', approval="never")
    assert pm_client.post(url, data).status_code == 302
    server.refresh_from_db()
    assert server.command == FAKE_MCP_COMMAND and server.approval == "never"


def test_form_errors_name_the_field(admin_client, team):
    response = admin_client.post(ADD, form(team, header_vars='{"X-Key": "LOOM_SECRET_KEY"}'))
    assert response.status_code == 200
    assert "Loom&#x27;s own settings" in response.content.decode()
    assert not McpServer.objects.exists()


def test_another_teams_servers_are_not_the_pms(pm_client, other_team):
    server = make_mcp_server(other_team, name="theirs")
    assert "theirs" not in pm_client.get(LIST).content.decode()
    url = reverse("admin:teams_mcpserver_change", args=[server.pk])
    assert pm_client.get(url).status_code == 302  # "doesn't exist", back to the index


def test_a_pm_cannot_re_point_a_server_that_carries_host_secrets(pm_client, team):
    """Issue 33, finding 1: the admin's form refuses what the API refuses."""
    from teams.integrations import mcp_servers

    server = mcp_servers.mcp_server_create(
        team=team,
        name="github",
        transport="http",
        url="https://mcp.example.test/mcp",
        header_vars={"Authorization": "GITHUB_TOKEN"},
        by_superuser=True,
    )
    url = reverse("admin:teams_mcpserver_change", args=[server.pk])
    moved = form(
        team,
        name="github",
        url="https://attacker.example.test/mcp",
        header_vars='{"Authorization": "GITHUB_TOKEN"}',
    )
    response = pm_client.post(url, moved)
    assert response.status_code == 200  # the form again, with the error
    assert "Only a superuser may change where MCP server" in response.content.decode()
    server.refresh_from_db()
    assert server.url == "https://mcp.example.test/mcp"


def test_a_pm_sees_the_demos_command_without_the_hosts_paths(pm_client, admin_client, team):
    """Issue 33, finding 8: the list and the server's page show a PM `python -m …`; a
    superuser sees the command that runs, the host's virtualenv Python in it."""
    import sys
    from pathlib import Path

    from teams.engine import mcp_demo_server

    server = mcp_demo_server.register(team)
    change = reverse("admin:teams_mcpserver_change", args=[server.pk])
    shown = f"{Path(sys.executable).name} -m teams.engine.mcp_demo_server"
    for page in (pm_client.get(LIST), pm_client.get(change)):
        text = page.content.decode()
        assert page.status_code == 200
        assert shown in text and str(Path(sys.executable).parent) not in text
    whole = f"{sys.executable} -m teams.engine.mcp_demo_server"
    assert whole in admin_client.get(LIST).content.decode()
    assert 'name="command"' in admin_client.get(change).content.decode()
