"""Loom as an MCP client, against the fake servers over stdio (tests/fakes/mcp_stdio.py,
light) and streamable HTTP (the SDK's, tests.fakes.mcp_servers): listing, calling, and
every way a server can fail."""

import time

import pytest

from teams.engine import mcp_client, mcp_runtime, mcp_spec
from teams.errors import McpUnavailable
from teams.models import McpServer
from tests.fakes.mcp_servers import HUGE_CHARS, PNG, free_port
from tests.helpers import make_mcp_server

SECRET = "s3cret-value-0451"


@pytest.fixture(autouse=True)
def quick(settings):
    settings.LOOM_MCP_TIMEOUT = 8


@pytest.fixture
def server(team):
    return make_mcp_server(team)


def fresh(server):
    return McpServer.objects.get(pk=server.pk)


def test_refresh_lists_the_tools_and_keeps_out_an_invalid_schema(server):
    mcp_client.refresh(server)
    row = fresh(server)
    tools = {t["name"]: t for t in row.tools}
    assert {"echo", "add", "image", "crash", "hang", "huge", "broken"} <= set(tools)
    assert tools["add"]["input_schema"]["required"] == ["a", "b"]
    assert tools["add"]["description"] == "Add two integers."
    assert "invalid" in tools["broken"]["problem"] and "input_schema" not in tools["broken"]
    assert row.listed_at is not None and row.healthy


def test_a_call_gives_text_and_a_tool_error_is_an_error_result(server):
    assert mcp_client.call_tool(server, "add", {"a": 2, "b": 3}) == mcp_client.McpCallResult(
        text="5", is_error=False
    )
    failed = mcp_client.call_tool(server, "fail", {})
    assert failed.is_error and "failed on purpose" in failed.text
    refused = mcp_client.call_tool(server, "no_such_tool", {})
    assert refused.is_error and fresh(server).healthy


def test_an_image_is_described_not_dropped(server):
    result = mcp_client.call_tool(server, "image", {})
    assert result.text == f"[image image/png, {len(PNG)} bytes not shown]"


def test_the_connection_is_reused_across_calls(server):
    first = mcp_client.call_tool(server, "pid", {}).text
    assert mcp_client.call_tool(server, "pid", {}).text == first
    mcp_client.list_tools(server)
    assert mcp_client.call_tool(server, "pid", {}).text == first
    assert mcp_runtime.RUNTIME.open_count() == 1


def test_a_crash_mid_call_is_a_clear_failure_and_the_server_is_restarted(server):
    before = mcp_client.call_tool(server, "pid", {}).text
    with pytest.raises(McpUnavailable, match="'fake' failed: Connection closed"):
        mcp_client.call_tool(server, "crash", {})
    assert "Connection closed" in fresh(server).error and fresh(server).error_at
    after = mcp_client.call_tool(server, "pid", {}).text
    assert after != before  # a new process
    assert fresh(server).healthy  # cleared by the call that went through


def test_a_hang_fails_at_the_timeout_and_the_server_is_restarted(server, settings):
    before = mcp_client.call_tool(server, "pid", {}).text
    settings.LOOM_MCP_TIMEOUT = 1
    started = time.monotonic()
    with pytest.raises(McpUnavailable, match="did not answer within 1 seconds"):
        mcp_client.call_tool(server, "hang", {})
    assert time.monotonic() - started < 3
    assert "did not answer" in fresh(server).error
    settings.LOOM_MCP_TIMEOUT = 8
    assert mcp_client.call_tool(server, "pid", {}).text != before


def test_a_5_mb_result_is_cut_to_the_tools_budget(server):
    result = mcp_client.call_tool(server, "huge", {})
    assert not result.is_error
    assert result.text.startswith("x" * 100)
    assert len(result.text) < mcp_spec.MCP_RESULT_CHARS + 200
    assert f"showing 8,000 of {HUGE_CHARS:,} characters" in result.text


def test_a_server_that_answers_garbage_fails_within_the_timeout(team, settings, monkeypatch):
    monkeypatch.setenv("FAKE_MCP_MODE", "garbage")
    server = make_mcp_server(team, env_vars=["FAKE_MCP_MODE"])
    settings.LOOM_MCP_TIMEOUT = 1
    started = time.monotonic()
    mcp_client.refresh(server)
    assert time.monotonic() - started < 3
    row = fresh(server)
    assert not row.healthy and "'fake'" in row.error and row.tools == []


def test_a_missing_program_is_a_clear_failure(team):
    server = make_mcp_server(team, command=["/no/such/program-xyz", "--flag"])
    with pytest.raises(McpUnavailable, match="no program 'program-xyz' on the Loom host"):
        mcp_client.list_tools(server)
    assert "no program" in fresh(server).error


def test_the_server_gets_only_the_variables_it_names_and_their_values_never_show(team, monkeypatch):
    monkeypatch.setenv("FAKE_SECRET_TOKEN", SECRET)
    monkeypatch.setenv("OTHER_SECRET_TOKEN", "not-for-the-server")
    server = make_mcp_server(team, env_vars=["FAKE_SECRET_TOKEN"])
    result = mcp_client.call_tool(
        server, "env", {"names": ["FAKE_SECRET_TOKEN", "OTHER_SECRET_TOKEN"]}
    )
    assert f"FAKE_SECRET_TOKEN=[hidden] ({len(SECRET)} characters)" in result.text
    assert "OTHER_SECRET_TOKEN is unset" in result.text
    assert SECRET not in result.text


def test_a_named_variable_that_is_not_set_is_a_clear_failure(team, monkeypatch):
    monkeypatch.delenv("FAKE_SECRET_TOKEN", raising=False)
    server = make_mcp_server(team, env_vars=["FAKE_SECRET_TOKEN"])
    with pytest.raises(McpUnavailable, match=r"not set in Loom's environment: FAKE_SECRET_TOKEN"):
        mcp_client.call_tool(server, "pid", {})


def test_a_changed_command_restarts_the_connection(server):
    first = mcp_client.call_tool(server, "pid", {}).text
    from teams.integrations import mcp_servers

    changed = mcp_servers.mcp_server_update(
        server=server, changes={"command": [*server.command, "--again"]}, by_superuser=True
    )
    assert mcp_client.call_tool(changed, "pid", {}).text != first


# --- streamable HTTP -----------------------------------------------------------------


@pytest.fixture
def http_server(team, mcp_http, monkeypatch):
    monkeypatch.setenv("FAKE_HEADER_TOKEN", SECRET)
    from teams.integrations import mcp_servers

    return mcp_servers.mcp_server_create(
        team=team,
        name="web",
        transport="http",
        url=mcp_http.url,
        header_vars={"X-Api-Key": "FAKE_HEADER_TOKEN"},
        by_superuser=True,
    )


def test_an_http_server_is_listed_and_called_with_its_headers(http_server, mcp_http):
    mcp_client.refresh(http_server)
    assert "add" in {t["name"] for t in fresh(http_server).tools}
    assert mcp_client.call_tool(http_server, "add", {"a": 1, "b": 1}).text == "2"
    assert any(h.get("x-api-key") == SECRET for h in mcp_http.seen_headers)
    assert mcp_runtime.RUNTIME.open_count() == 1


def test_an_http_server_that_hangs_fails_at_the_timeout(http_server, settings):
    settings.LOOM_MCP_TIMEOUT = 1
    started = time.monotonic()
    with pytest.raises(McpUnavailable, match="'web'"):
        mcp_client.call_tool(http_server, "hang", {"seconds": 5})
    assert time.monotonic() - started < 3
    assert not fresh(http_server).healthy


def test_an_http_server_that_is_not_there_is_a_clear_failure(team, settings, loopback_allowed):
    from teams.integrations import mcp_servers

    settings.LOOM_MCP_TIMEOUT = 2
    server = mcp_servers.mcp_server_create(
        team=team, name="gone", transport="http", url=f"http://127.0.0.1:{free_port()}/mcp"
    )
    started = time.monotonic()
    mcp_client.refresh(server)
    assert time.monotonic() - started < 4
    assert "'gone'" in fresh(server).error


@pytest.mark.django_db(transaction=True)
def test_a_tool_list_change_is_picked_up(team):
    server = make_mcp_server(team)
    mcp_client.refresh(server)
    assert "grown" not in {t["name"] for t in fresh(server).tools}
    mcp_client.call_tool(server, "grow", {})
    deadline = time.monotonic() + 10
    while "grown" not in {t["name"] for t in fresh(server).tools}:
        assert time.monotonic() < deadline, "the listing was not refreshed"
        time.sleep(0.1)
