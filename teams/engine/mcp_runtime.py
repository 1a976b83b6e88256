"""The MCP SDK's side of Loom's MCP client (teams.engine.mcp_client is the face the
rest of Loom calls, and imports this module at the first connection): the connections
on one event loop per process, in a daemon thread ("loom-mcp"), the work each call
does on them, and results turned into text for the model."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import tempfile
import threading
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from django.conf import settings
from mcp import Client, StdioServerParameters, stdio_client
from mcp import types as mt
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from teams.engine.mcp_spec import MCP_RESULT_CHARS, McpCallResult, Spec, timeout
from teams.errors import McpUnavailable
from teams.integrations import mcp_servers
from teams.lib import outbound

STDERR_TAIL = 2000  # bytes of a stdio server's stderr read back for an error text
# The JSON-RPC errors that mean the connection, not the call, failed.
CONNECTION_ERRORS = {mt.CONNECTION_CLOSED, mt.REQUEST_TIMEOUT}
LOOM_CLIENT = mt.Implementation(name="loom", version="1")


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


# --- one connection, owned by a task on the loop -----------------------------------


class _Connection:
    def __init__(self, spec: Spec, runtime: _Runtime):
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
        # (server id) -> None: lists the server again (mcp_client sets it: it writes the row)
        self.on_tools_changed = lambda server_id: None

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

    def run(self, spec: Spec, work, seconds: float):
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

    async def _with_client(self, spec: Spec, work, seconds: float):
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
            target=self.on_tools_changed, args=(server_id,), name="loom-mcp-refresh", daemon=True
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


def _reason(spec: Spec, exc: BaseException) -> str:
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


async def listing(client: Client, left: float) -> list[dict]:
    """The server's tools, page by page, within `left` seconds."""
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


def calling(spec: Spec, server_name: str, tool_name: str, arguments: dict[str, Any]):
    """The work of one call of the tool (for Runtime.run)."""

    async def work(client: Client, left: float) -> McpCallResult:
        try:
            result = await client.call_tool(tool_name, arguments or {}, read_timeout_seconds=left)
        except MCPError as exc:
            if exc.code in CONNECTION_ERRORS or exc.code == mt.INTERNAL_ERROR:
                raise
            # The server answered, refusing the call (unknown tool, bad arguments).
            return McpCallResult(
                text=spec.scrub(f"{server_name} refused the call: {exc.message}"[:2000]),
                is_error=True,
            )
        if isinstance(result, mt.CallToolResult):
            text = spec.scrub(result_text(result))
            return McpCallResult(text=text, is_error=bool(result.is_error))
        return McpCallResult(text="The server gave no result Loom understands.", is_error=True)

    return work


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
