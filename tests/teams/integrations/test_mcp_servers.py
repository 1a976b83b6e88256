"""teams.integrations.mcp_servers: what a listing keeps out and why, and which tools an agent is
offered (by role, phase and policy)."""

import pytest

from teams.errors import PermissionDenied
from teams.integrations import mcp_servers

pytestmark = pytest.mark.django_db

OK = {"type": "object", "properties": {"q": {"type": "string"}}}


def http(team, name="docs", **kwargs):
    return mcp_servers.mcp_server_create(
        team=team, name=name, transport="http", url="https://mcp.example.test/", **kwargs
    )


def test_a_listing_keeps_out_what_a_model_cannot_be_offered(team):
    server = http(team, name="a" * 32)
    listed = mcp_servers.listed_tools(
        server=server,
        tools=[
            {"name": "search", "description": "Find.", "input_schema": OK},
            {"name": "s" * 31, "description": "", "input_schema": OK},
            {"name": "bad name", "description": "", "input_schema": OK},
            {"name": "text", "description": "", "input_schema": {"type": "string"}},
            {"name": "list", "description": "", "input_schema": ["not", "a", "schema"]},
            {"name": "search", "description": "again", "input_schema": OK},
        ],
    )
    problems = {(t["name"], t.get("problem", "")[:30]) for t in listed}
    assert ("search", "") in problems
    assert ("s" * 31, f"{'a' * 32}__{'s' * 31} is over 64"[:30]) in problems
    assert ("bad name", "its name is not 1-64 letters, ") in problems
    assert ("text", 'its input schema is not of "ty') in problems
    assert ("list", "its input schema is not a JSON") in problems
    assert ("search", "the server lists it twice") in problems


def test_the_offered_tools_follow_roles_phases_and_policies(team):
    docs = http(team, roles=["coder"], tool_approvals={"drop": "never", "read": "auto"})
    mcp_servers.mcp_server_record_tools(
        server=docs,
        tools=[{"name": n, "description": "", "input_schema": OK} for n in ("read", "drop", "edit")]
        + [
            {
                "name": "broken",
                "description": "",
                "input_schema": {"type": "object", "properties": 1},
            }
        ],
    )
    offered = mcp_servers.mcp_offered_tools(team=team, role="coder", phase="planning")
    assert [(s.name, t["name"], p) for s, t, p in offered] == [
        ("docs", "read", "auto"),
        ("docs", "edit", "ask"),
    ]
    assert mcp_servers.mcp_offered_tools(team=team, role="tester", phase="planning") == []


def test_a_config_change_forgets_the_listing_and_stdio_is_a_superusers(team):
    docs = http(team)
    mcp_servers.mcp_server_record_tools(
        server=docs, tools=[{"name": "read", "description": "", "input_schema": OK}]
    )
    same = mcp_servers.mcp_server_update(server=docs, changes={"approval": "auto"})
    assert same.tools and same.listed_at
    moved = mcp_servers.mcp_server_update(server=docs, changes={"url": "https://b.test/"})
    assert moved.tools == [] and moved.listed_at is None
    with pytest.raises(PermissionDenied):
        mcp_servers.mcp_server_update(
            server=docs, changes={"transport": "stdio", "command": ["sh"]}
        )
