"""Issue 33, finding 1: a host's secret goes only where a superuser pointed it. A PM
may not re-point a server a superuser gave header_vars (nor carry them away through a
fork), and the server a PM points it at never sees the secret."""

import pytest
from django.contrib.auth.models import Permission

from teams.models import McpServer, Message, Team
from tests.fakes.mcp_servers import McpHttpServer
from tests.helpers import ApiClient, api_token

pytestmark = pytest.mark.django_db

BASE = "/teams/alpha/mcp-servers"
SECRET = "ghp-the-hosts-own-token-4242"


@pytest.fixture(autouse=True)
def quick(settings, loopback_allowed, monkeypatch):
    settings.LOOM_MCP_TIMEOUT = 8
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)


@pytest.fixture
def pm_api(pm):
    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    return ApiClient(api_token(user=pm, label="alice's scripts"))


@pytest.fixture
def servers():
    """The real server the superuser chose, and the attacker's."""
    with McpHttpServer() as real, McpHttpServer() as attacker:
        yield real, attacker


def secrets_seen(server: McpHttpServer) -> int:
    return sum(SECRET in " ".join(h.values()) for h in server.seen_headers)


@pytest.fixture
def github(root_api, servers, team):
    real, _ = servers
    body = {
        "name": "github",
        "transport": "http",
        "url": real.url,
        "header_vars": {"Authorization": "GITHUB_TOKEN"},
        "approval": "auto",
    }
    assert root_api.post(BASE, body).status_code == 201
    return McpServer.objects.get(name="github")


def test_a_pm_cannot_re_point_a_server_that_carries_host_secrets(pm_api, github, servers):
    real, attacker = servers
    refused = pm_api.patch(f"{BASE}/github", {"url": attacker.url})
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "Only a superuser may change where MCP server 'github' connects (its URL or "
        "transport): it sends the Loom host's own secrets (GITHUB_TOKEN) there. To point it "
        "elsewhere without them, clear header_vars in the same change."
    )
    assert McpServer.objects.get(pk=github.pk).url == real.url
    assert pm_api.post(f"{BASE}/github/refresh").json()["healthy"] is True
    assert attacker.seen_headers == [] and secrets_seen(real) > 0


def test_a_pm_re_points_it_without_the_variables_and_the_secret_stays_home(pm_api, github, servers):
    _, attacker = servers
    moved = pm_api.patch(f"{BASE}/github", {"url": attacker.url, "header_vars": {}})
    assert moved.status_code == 200 and moved.json()["header_vars"] == {}
    assert pm_api.post(f"{BASE}/github/refresh").json()["healthy"] is True
    assert attacker.seen_headers and secrets_seen(attacker) == 0


def test_the_superuser_re_points_it(root_api, github, servers):
    _, elsewhere = servers
    assert root_api.patch(f"{BASE}/github", {"url": elsewhere.url}).status_code == 200


def test_a_pms_fork_copies_the_server_without_its_variables(pm_api, github, servers, team):
    _, attacker = servers
    point = Message.objects.create(team=team, kind=Message.Kind.PM, content="Go.")
    forked = pm_api.post("/teams/alpha/fork", {"at_message": point.pk, "slug": "alpha-f"})
    assert forked.status_code == 201, forked.content
    assert forked.json()["mcp_servers_without_variables"] == ["github"]
    copy = McpServer.objects.get(team__slug="alpha-f", name="github")
    assert copy.header_vars == {} and copy.url == github.url
    # The fork's copy is the PM's to point anywhere: it carries nothing of the host's.
    moved = pm_api.patch("/teams/alpha-f/mcp-servers/github", {"url": attacker.url})
    assert moved.status_code == 200
    pm_api.post("/teams/alpha-f/mcp-servers/github/refresh")
    assert attacker.seen_headers and secrets_seen(attacker) == 0
    assert McpServer.objects.get(pk=github.pk).header_vars == {"Authorization": "GITHUB_TOKEN"}


def test_a_superusers_fork_keeps_the_variables(root_api, github, team):
    point = Message.objects.create(team=team, kind=Message.Kind.PM, content="Go.")
    forked = root_api.post("/teams/alpha/fork", {"at_message": point.pk, "slug": "alpha-r"})
    assert forked.status_code == 201 and forked.json()["mcp_servers_without_variables"] == []
    copy = McpServer.objects.get(team=Team.objects.get(slug="alpha-r"), name="github")
    assert copy.header_vars == {"Authorization": "GITHUB_TOKEN"}
