"""The acceptance over the real HTTP path: `manage.py serve` (Daphne, the embedded
mode, no ASGI lifespan) on a loopback port, and the official MCP client as a
program with a team token."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from django.utils import timezone

from teams.conversation import pm_requests
from teams.models import ApiToken, PMRequest, Team
from teams.run import team_actions
from tests.helpers import api_token, make_team
from tests.teams.mcp.conftest import PM_TOOLS, mcp_session, text_of

pytestmark = pytest.mark.django_db(transaction=True)


async def a_pm_session(url: str, key: str, request_id: int) -> dict:
    seen = {}
    async with mcp_session(key, url) as client:
        seen["tools"] = {tool.name for tool in (await client.list_tools()).tools}
        listed = await client.call_tool("list_pm_requests", {})
        seen["requests"] = [r["id"] for r in listed.structured_content["requests"]]
        answered = await client.call_tool(
            "answer_pm_request", {"team": "alpha", "request_id": request_id, "answer": "Go"}
        )
        seen["answered"] = (answered.is_error, text_of(answered))
        for slug in ("beta", "gamma"):
            result = await client.call_tool("team_status", {"team": slug})
            seen[slug] = (result.is_error, text_of(result))
    return seen


async def status_code(url: str, key: str | None) -> int:
    headers = {"Accept": "application/json, text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    async with httpx2.AsyncClient(trust_env=False) as http:
        return (await http.post(url, json=body, headers=headers)).status_code


def test_a_program_works_as_the_pm_over_mcp_on_the_served_site(start_site):
    team = make_team("alpha")
    make_team("beta", agents=[{"name": "coach", "role": "coach"}])
    team_actions.team_start(team=team)
    request = pm_requests.pm_request_open(
        team=team, agent=team.agents.get(name="coach"), question="Ship it?"
    )
    assert Team.objects.get(pk=team.pk).status == Team.Status.AWAITING_PM
    key = api_token(team=team, label="claude code")
    revoked = api_token(team=team, label="old")
    ApiToken.objects.filter(key_hash=ApiToken.hash_key(revoked)).update(revoked_at=timezone.now())
    site = start_site(LOOM_OFFLINE_DELAY="5")
    url = f"{site.url}/mcp"

    seen = asyncio.run(a_pm_session(url, key, request.id))

    assert seen["tools"] == PM_TOOLS
    assert seen["requests"] == [request.id]
    assert seen["answered"][0] is False, seen["answered"]
    assert PMRequest.objects.get(pk=request.id).status == "answered"
    assert Team.objects.get(pk=team.pk).status != Team.Status.AWAITING_PM
    assert seen["beta"] == (True, "No team with slug 'beta'.")
    assert seen["gamma"] == (True, "No team with slug 'gamma'.")
    assert asyncio.run(status_code(url, None)) == 401
    assert asyncio.run(status_code(url, revoked)) == 401
    assert asyncio.run(status_code(url, key)) == 200
    assert "Traceback" not in site.log(), site.log()
