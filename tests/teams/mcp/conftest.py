"""An MCP client as a program runs one: the official SDK's Client over Streamable
HTTP, in process (the site's ASGI application behind httpx2's ASGI transport) or
against a live site on a loopback port."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx2
import pytest
from django.core.cache import cache
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.live_site import start_site  # noqa: F401 (the live site, a fixture)

IN_PROCESS_URL = "http://localhost/mcp"
# The tools a PM's token is offered at /mcp.
PM_TOOLS = {
    "list_teams",
    "team_status",
    "list_pm_requests",
    "answer_pm_request",
    "post_message",
    "start_team",
    "pause_team",
    "resume_team",
}


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    cache.clear()
    yield
    cache.clear()


def http_client(token: str | None = None, *, app=None) -> httpx2.AsyncClient:
    """An httpx2 client sending `Authorization: Bearer <token>`; with `app`, to that
    ASGI application in process."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx2.ASGITransport(app=app) if app is not None else None
    return httpx2.AsyncClient(headers=headers, transport=transport, trust_env=False)


@asynccontextmanager
async def mcp_session(token: str | None, url: str = IN_PROCESS_URL, *, mode="auto"):
    """A connected MCP client; in process unless `url` is a live site's."""
    from loomsite.asgi import application

    app = application if url == IN_PROCESS_URL else None
    async with http_client(token, app=app) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


def text_of(result) -> str:
    return "".join(block.text for block in result.content)
