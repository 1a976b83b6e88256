"""Issue 33, finding 4: the MCP HTTP client connects to the address the outbound guard
checked (no DNS rebinding) and ignores the environment's proxies unless
LOOM_MCP_USE_ENV_PROXY says otherwise."""

import socket

import pytest

from teams.engine import mcp_client
from teams.lib import outbound
from teams.models import McpServer
from tests.fakes.counting_server import CountingServer
from tests.fakes.mcp_servers import McpHttpServer

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.215.14"  # only ever an answer of the stub resolver: nothing connects to it


@pytest.fixture(autouse=True)
def quick(settings):
    settings.LOOM_MCP_TIMEOUT = 8


def test_a_name_that_turns_loopback_after_the_check_never_reaches_the_server(team, monkeypatch):
    """The guard's first lookup answers public, every later one loopback; the system
    resolver (what an unpinned connection would ask) answers loopback too."""
    answers = iter([[PUBLIC]])
    monkeypatch.setattr(outbound, "resolve", lambda host, port: next(answers, ["127.0.0.1"]))
    real_getaddrinfo = socket.getaddrinfo

    def system_resolver(host, *args, **kwargs):
        if host in ("rebind.example.test", b"rebind.example.test"):
            host = "127.0.0.1"
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", system_resolver)
    with McpHttpServer() as loopback:
        server = McpServer.objects.create(
            team=team,
            name="rebind",
            transport="http",
            url=f"http://rebind.example.test:{loopback.port}/mcp",
        )
        server = mcp_client.refresh(server)
    assert loopback.seen_headers == []
    assert server.tools == [] and not server.healthy
    assert "rebind.example.test resolves to 127.0.0.1" in server.error


def test_the_environments_proxy_is_not_used(team, mcp_http, monkeypatch, settings):
    with CountingServer() as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        server = McpServer.objects.create(
            team=team, name="docs", transport="http", url=mcp_http.url
        )
        server = mcp_client.refresh(server)
        assert server.healthy and server.tools and proxy.requests == []
        mcp_client.close_all()
        settings.LOOM_MCP_USE_ENV_PROXY = True  # the operator's choice: through the proxy
        McpServer.objects.filter(pk=server.pk).update(listed_at=None)
        mcp_client.refresh(McpServer.objects.get(pk=server.pk))
        assert proxy.requests != []
