"""Loom as an MCP client: the tools of a team's MCP servers, listed and called through
the official SDK (`mcp.Client`), with a synchronous face for worker threads. This
module is that face; teams.engine.mcp_runtime holds the SDK's side and is imported at
the first connection.

The SDK is async: its connections live on one event loop per process, in a daemon
thread ("loom-mcp"). A connection is kept per server (keyed by its id and a
fingerprint of its settings and variable values), reused across turns, and started
again when it died or its settings changed. Every connection, listing and call is
bounded by LOOM_MCP_TIMEOUT; a server that crashes, hangs, answers garbage or cannot be
reached gives McpUnavailable (the tool adapter shows "Error: ..."), is marked
unhealthy on its row (McpServer.error), and its connection is dropped, so the next
call starts it afresh. A call that goes through marks it healthy again.

A stdio server gets only the variables it names (plus the SDK's safe defaults: PATH,
HOME...), read from Loom's environment when it is spawned; an HTTP server's headers
come from the variables they name. Their values never reach a page, a response, a
log or an error text (errors are scrubbed of them).

Results are text for the model: at most MCP_RESULT_CHARS characters (a 5 MB result
keeps its first ones and says how long it was); images, audio and binary resources
are described, not dropped. Loom speaks the handshake-era protocol (mode="legacy"),
which every MCP server today understands and on which a server's
notifications/tools/list_changed arrives on the session: the listing is then
refreshed in the background."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.db import close_old_connections
from django.db import connection as db_connection

from teams.engine.mcp_spec import McpCallResult, spec_of, timeout
from teams.errors import McpUnavailable
from teams.integrations import mcp_servers
from teams.models import McpServer

log = logging.getLogger("loom.mcp")


# --- the synchronous face ------------------------------------------------------------


def list_tools(server: McpServer) -> list[dict]:
    """The server's tools as it lists them now: name, description, input_schema.
    Raises McpUnavailable (and marks the server unhealthy) when it cannot be listed."""
    seconds = timeout()
    try:
        spec = spec_of(server)
        runtime = _runtime()
        tools = runtime.RUNTIME.run(spec, runtime.listing, seconds)
    except McpUnavailable as exc:
        mcp_servers.mcp_server_record_failure(server=server, error=exc.message)
        raise
    return tools


def call_tool(server: McpServer, tool_name: str, arguments: dict[str, Any]) -> McpCallResult:
    """Call one tool of the server. A tool's own failure is a result with is_error; a
    server that cannot answer raises McpUnavailable and is marked unhealthy."""
    seconds = timeout()
    try:
        spec = spec_of(server)
        runtime = _runtime()
        work = runtime.calling(spec, server.name, tool_name, arguments)
        outcome = runtime.RUNTIME.run(spec, work, seconds)
    except McpUnavailable as exc:
        mcp_servers.mcp_server_record_failure(server=server, error=exc.message)
        raise
    mcp_servers.mcp_server_record_success(server=server)
    return outcome


def refresh(server: McpServer) -> McpServer:
    """List the server's tools again and keep them on its row (each tool checked); a
    server that cannot be listed keeps its last listing and is marked unhealthy (the
    row says why). Never raises for the server's failure: the row has the outcome."""
    try:
        tools = list_tools(server)
    except McpUnavailable:
        server.refresh_from_db(fields=["error", "error_at"])
        return server
    return mcp_servers.mcp_server_record_tools(server=server, tools=tools)


def list_at_once(server: McpServer) -> McpServer:
    """A server just added or re-pointed, as a face answers it: a stdio server (a
    process on this host) listed now; an HTTP one as it is, listed when the team's
    next turn begins (list_unlisted), so a face never waits on someone's URL."""
    if server.listed_at is None and server.transport == McpServer.Transport.STDIO:
        return refresh(server)
    return server


def list_unlisted(team_id: int) -> int:
    """List the tools of the team's servers never listed nor tried (added by a face or
    a script that did not list them): a turn offers them at once. How many it tried."""
    unlisted = McpServer.objects.filter(team_id=team_id, listed_at__isnull=True, error="")
    tried = 0
    for server in unlisted:
        refresh(server)
        tried += 1
    return tried


def refresh_by_id(server_id: int) -> None:
    close_old_connections()
    try:
        server = McpServer.objects.filter(pk=server_id).first()
        if server is not None:
            refresh(server)
    except Exception:  # a background refresh must not kill anything
        log.exception("Refreshing the tools of MCP server %s failed", server_id)
    finally:
        db_connection.close()


def close_all() -> None:
    """Stop every connection of this process (tests, shutdown)."""
    runtime = sys.modules.get("teams.engine.mcp_runtime")
    if runtime is not None:  # else no connection was ever made
        runtime.RUNTIME.close_all()


def _runtime():
    """The SDK's side, imported at the first connection: the MCP SDK is about 0.7 s of
    imports that a process which never connects (most management commands, a web
    process nobody adds a server in) does not pay."""
    from teams.engine import mcp_runtime

    mcp_runtime.RUNTIME.on_tools_changed = refresh_by_id
    return mcp_runtime
