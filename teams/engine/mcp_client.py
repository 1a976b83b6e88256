"""Loom as an MCP client: the tools of a team's MCP servers, listed and called through
the official SDK (`mcp.Client`), with a synchronous face for worker threads.

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

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import os
import tempfile
import threading
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx2
from django.conf import settings
from django.db import close_old_connections
from django.db import connection as db_connection
from mcp import Client, StdioServerParameters, stdio_client
from mcp import types as mt
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from teams.errors import McpUnavailable
from teams.integrations import mcp_servers
from teams.lib import outbound
from teams.models import McpServer
from tools.base import MAX_RESULT_CHARS

log = logging.getLogger("loom.mcp")

MCP_RESULT_CHARS = MAX_RESULT_CHARS
STDERR_TAIL = 2000  # bytes of a stdio server's stderr read back for an error text
HIDDEN = "[hidden]"
# The JSON-RPC errors that mean the connection, not the call, failed.
CONNECTION_ERRORS = {mt.CONNECTION_CLOSED, mt.REQUEST_TIMEOUT}
LOOM_CLIENT = mt.Implementation(name="loom", version="1")


@dataclass(frozen=True)
class McpCallResult:
    text: str
    is_error: bool


def timeout() -> float:
    return float(settings.LOOM_MCP_TIMEOUT)


def make_http_client(*, url: str, headers: dict[str, str], seconds: float) -> httpx2.AsyncClient:
    """The HTTP client of one connection to a streamable HTTP server: the one place it
    is made. The outbound guard checks the URL's host (every address it resolves to)
    before the connection, and each connection goes to an address it checked in its
    own lookup (a name that turns private meanwhile is refused, as for webhooks);
    redirects are not followed. The environment's proxies are not used unless
    LOOM_MCP_USE_ENV_PROXY says so: the proxy then resolves the name itself."""
    scheme, host, port = outbound.parse(url)
    outbound.checked_addresses(host, port, timeout=seconds)  # Refused: not connected
    limits = httpx2.Timeout(seconds, read=max(seconds, 300.0))
    if settings.LOOM_MCP_USE_ENV_PROXY:
        return httpx2.AsyncClient(
            headers=headers, timeout=limits, follow_redirects=False, trust_env=True
        )
    return outbound.async_client(headers=headers, timeout=limits)


# --- what a connection needs ----------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    server_id: int
    name: str
    transport: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    url: str
    headers: tuple[tuple[str, str], ...]
    fingerprint: str = field(compare=False)

    @property
    def secrets(self) -> list[str]:
        return [v for _, v in (*self.env, *self.headers) if v]

    def scrub(self, text: str) -> str:
        for value in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(value, HIDDEN)
        return text


def _spec(server: McpServer) -> _Spec:
    """The server's settings with its variables' values, read from the environment now."""
    missing = []

    def value(name: str, what: str) -> str:
        if name not in os.environ:
            missing.append(f"{name} ({what})")
            return ""
        return os.environ[name]

    env = tuple((n, value(n, "environment")) for n in server.env_vars or [])
    headers = tuple(
        (h, value(v, f"header {h}")) for h, v in sorted((server.header_vars or {}).items())
    )
    if missing:
        raise McpUnavailable(
            f"MCP server {server.name!r} needs variables that are not set in Loom's "
            f"environment: {', '.join(missing)}."
        )
    digest = hashlib.sha256(
        json.dumps([mcp_servers.connection_fingerprint(server), env, headers]).encode()
    ).hexdigest()
    return _Spec(
        server_id=server.pk,
        name=server.name,
        transport=server.transport,
        command=tuple(server.command or ()),
        env=env,
        url=server.url,
        headers=headers,
        fingerprint=digest,
    )


# --- one connection, owned by a task on the loop -----------------------------------


class _Connection:
    def __init__(self, spec: _Spec, runtime: _Runtime):
        self.spec = spec
        self.runtime = runtime
        self.client: Client | None = None
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.closing = asyncio.Event()
        self.dead = False
        self.stderr = tempfile.TemporaryFile("w+b") if spec.transport == "stdio" else None
        self.task = asyncio.create_task(self._own(), name=f"mcp:{spec.name}")

    async def _own(self) -> None:
        """Enter the SDK's client, hold it until closed, leave it (in this one task, as
        the SDK's cancel scopes require)."""
        try:
            async with AsyncExitStack() as stack:
                if self.spec.transport == "stdio":
                    program, *args = self.spec.command
                    params = StdioServerParameters(
                        command=program, args=list(args), env=dict(self.spec.env)
                    )
                    transport = stdio_client(params, errlog=self.stderr)
                else:
                    http = make_http_client(
                        url=self.spec.url, headers=dict(self.spec.headers), seconds=timeout()
                    )
                    await stack.enter_async_context(http)
                    transport = streamable_http_client(self.spec.url, http_client=http)
                client = Client(
                    transport,
                    mode="legacy",
                    read_timeout_seconds=timeout(),
                    message_handler=self._on_message,
                    client_info=LOOM_CLIENT,
                    cache=None,
                )
                self.client = await stack.enter_async_context(client)
                if not self.ready.done():
                    self.ready.set_result(self.client)
                await self.closing.wait()
        except BaseException as exc:  # noqa: BLE001 - the owner task reports, never raises
            if not self.ready.done():
                self.ready.set_exception(_as_exception(exc))
        finally:
            self.dead = True
            self.runtime.forget(self)
            if self.stderr is not None:
                self.stderr.close()

    async def _on_message(self, message) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            self.runtime.tools_changed(self.spec.server_id)

    def close(self) -> None:
        """Leave the SDK's client (the server process is stopped) in the owner task."""
        self.dead = True
        self.runtime.forget(self)
        self.closing.set()

    def stderr_tail(self) -> str:
        if self.stderr is None or self.stderr.closed:
            return ""
        try:
            size = self.stderr.seek(0, os.SEEK_END)
            self.stderr.seek(max(0, size - STDERR_TAIL))
            tail = self.stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        return self.spec.scrub(lines[-1][:300]) if lines else ""


def _as_exception(exc: BaseException) -> Exception:
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        return _as_exception(inner[0]) if inner else RuntimeError("the connection was cancelled")
    if isinstance(exc, Exception):
        return exc
    return RuntimeError("the connection was cancelled")


# --- the runtime: the loop thread and the connections on it --------------------------


class _Runtime:
    def __init__(self):
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.connections: dict[int, _Connection] = {}  # touched on the loop only

    def _loop(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.loop is None or self.thread is None or not self.thread.is_alive():
                self.loop = asyncio.new_event_loop()
                self.connections = {}
                self.thread = threading.Thread(
                    target=self.loop.run_forever, name="loom-mcp", daemon=True
                )
                self.thread.start()
            return self.loop

    def run(self, spec: _Spec, work, seconds: float):
        """Run `work(client, seconds_left)` on the server's connection, from any thread,
        within `seconds` (plus a margin for the SDK's own timeout to speak first)."""
        future = asyncio.run_coroutine_threadsafe(
            self._with_client(spec, work, seconds), self._loop()
        )
        try:
            return future.result(seconds + 5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpUnavailable(
                f"MCP server {spec.name!r} did not answer within {seconds:g} seconds."
            ) from None

    async def _with_client(self, spec: _Spec, work, seconds: float):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        connection = self.connections.get(spec.server_id)
        if connection is not None and (
            connection.dead or connection.spec.fingerprint != spec.fingerprint
        ):
            connection.close()
            connection = None
        if connection is None:
            connection = _Connection(spec, self)
            self.connections[spec.server_id] = connection
        try:
            client = await asyncio.wait_for(asyncio.shield(connection.ready), seconds)
        except TimeoutError:
            connection.close()
            connection.task.cancel()
            raise McpUnavailable(
                f"MCP server {spec.name!r} did not start within {seconds:g} seconds"
                + _said(connection)
            ) from None
        except Exception as exc:
            connection.close()
            raise McpUnavailable(
                f"MCP server {spec.name!r} could not be started: {_reason(spec, exc)}"
                + _said(connection)
            ) from None
        left = max(0.1, deadline - loop.time())
        try:
            return await work(client, left)
        except MCPError as exc:
            if exc.code in CONNECTION_ERRORS or exc.code == mt.INTERNAL_ERROR:
                connection.close()
                what = (
                    f"did not answer within {seconds:g} seconds"
                    if exc.code == mt.REQUEST_TIMEOUT
                    else f"failed: {spec.scrub(exc.message)}"
                )
                raise McpUnavailable(
                    f"MCP server {spec.name!r} {what}" + _said(connection)
                ) from None
            raise
        except TimeoutError:
            connection.close()
            raise McpUnavailable(
                f"MCP server {spec.name!r} did not answer within {seconds:g} seconds"
                + _said(connection)
            ) from None
        except (ValidationError, ValueError, OSError, httpx2.HTTPError) as exc:
            connection.close()
            raise McpUnavailable(
                f"MCP server {spec.name!r} answered something Loom cannot use: {_reason(spec, exc)}"
            ) from None

    def forget(self, connection: _Connection) -> None:
        if self.connections.get(connection.spec.server_id) is connection:
            del self.connections[connection.spec.server_id]

    def tools_changed(self, server_id: int) -> None:
        """The server said its tool list changed: list it again, in a thread of its own
        (it writes the row)."""
        threading.Thread(
            target=_refresh_by_id, args=(server_id,), name="loom-mcp-refresh", daemon=True
        ).start()

    def close_all(self) -> None:
        loop = self.loop
        if loop is None or not loop.is_running():
            return

        async def close() -> None:
            connections = list(self.connections.values())
            for connection in connections:
                connection.close()
            if connections:
                await asyncio.wait([c.task for c in connections], timeout=10)

        asyncio.run_coroutine_threadsafe(close(), loop).result(15)

    def open_count(self) -> int:
        """Live connections (the tests check reuse with it)."""
        return sum(1 for c in list(self.connections.values()) if not c.dead)


def _said(connection: _Connection) -> str:
    tail = connection.stderr_tail()
    return f" (its last words: {tail})" if tail else ""


def _reason(spec: _Spec, exc: BaseException) -> str:
    exc = _as_exception(exc)
    if isinstance(exc, FileNotFoundError):
        # Kept on the row PMs read: the program's name, not where the host keeps it.
        return f"no program {mcp_servers.program_shown(spec.command[0])!r} on the Loom host"
    if isinstance(exc, MCPError):
        text = exc.message
    elif isinstance(exc, ValidationError):
        text = f"a malformed answer ({exc.error_count()} problem(s))"
    elif isinstance(exc, httpx2.HTTPError):
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = str(exc) or type(exc).__name__
    return spec.scrub(" ".join(text.split())[:300])


RUNTIME = _Runtime()


# --- results -----------------------------------------------------------------------


def _b64_size(data: str) -> int:
    data = data or ""
    return max(0, len(data) * 3 // 4 - data[-2:].count("="))


def result_text(result: mt.CallToolResult, limit: int = MCP_RESULT_CHARS) -> str:
    """The result as text for the model: at most `limit` characters of it, the rest
    said to exist; content that is not text described."""
    parts: list[str] = []
    total = 0  # characters of the whole text, counted without keeping them

    def add(text: str) -> None:
        nonlocal total
        room = limit + 1 - sum(len(p) for p in parts)
        if room > 0:
            parts.append(text[:room])
        total += len(text)

    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            add(block.text)
        elif kind in ("image", "audio"):
            add(f"[{kind} {block.mime_type}, {_b64_size(block.data):,} bytes not shown]")
        elif kind == "resource_link":
            add(f"[resource {block.uri} ({block.name})]")
        elif kind == "resource":
            inner = block.resource
            if getattr(inner, "text", None) is not None:
                add(inner.text)
            else:
                mime = getattr(inner, "mime_type", None) or "binary"
                size = _b64_size(getattr(inner, "blob", ""))
                add(f"[resource {inner.uri}: {mime}, {size:,} bytes not shown]")
        else:
            add(f"[{kind or 'unknown'} content not shown]")
    if not result.content and result.structured_content is not None:
        add(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if total > limit:
        text = text[:limit] + (
            f"\n\n[Result truncated: showing {limit:,} of {total:,} characters.]"
        )
    return text


# --- the synchronous face ------------------------------------------------------------


def list_tools(server: McpServer) -> list[dict]:
    """The server's tools as it lists them now: name, description, input_schema.
    Raises McpUnavailable (and marks the server unhealthy) when it cannot be listed."""
    seconds = timeout()
    try:
        spec = _spec(server)

        async def work(client: Client, left: float) -> list[dict]:
            tools, cursor = [], None
            async with asyncio.timeout(left):
                for _ in range(20):  # pages
                    page = await client.list_tools(cursor=cursor)
                    tools += [
                        {
                            "name": t.name,
                            "description": t.description or "",
                            "input_schema": t.input_schema,
                        }
                        for t in page.tools
                    ]
                    cursor = page.next_cursor
                    if not cursor or len(tools) > mcp_servers.MAX_TOOLS * 2:
                        break
            return tools

        tools = RUNTIME.run(spec, work, seconds)
    except McpUnavailable as exc:
        mcp_servers.mcp_server_record_failure(server=server, error=exc.message)
        raise
    return tools


def call_tool(server: McpServer, tool_name: str, arguments: dict[str, Any]) -> McpCallResult:
    """Call one tool of the server. A tool's own failure is a result with is_error; a
    server that cannot answer raises McpUnavailable and is marked unhealthy."""
    seconds = timeout()
    try:
        spec = _spec(server)

        async def work(client: Client, left: float) -> mt.CallToolResult | McpCallResult:
            try:
                result = await client.call_tool(
                    tool_name, arguments or {}, read_timeout_seconds=left
                )
            except MCPError as exc:
                if exc.code in CONNECTION_ERRORS or exc.code == mt.INTERNAL_ERROR:
                    raise
                # The server answered, refusing the call (unknown tool, bad arguments).
                return McpCallResult(
                    text=spec.scrub(f"{server.name} refused the call: {exc.message}"[:2000]),
                    is_error=True,
                )
            if isinstance(result, mt.CallToolResult):
                text = spec.scrub(result_text(result))
                return McpCallResult(text=text, is_error=bool(result.is_error))
            return McpCallResult(text="The server gave no result Loom understands.", is_error=True)

        outcome = RUNTIME.run(spec, work, seconds)
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


def _refresh_by_id(server_id: int) -> None:
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
    RUNTIME.close_all()
