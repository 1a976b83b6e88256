"""The fake MCP server over streamable HTTP for the tests, written with the official
SDK's MCPServer (`McpHttpServer`, on a loopback port in a thread). Over stdio the tests
run tests/fakes/mcp_stdio.py instead: a light, standard-library-only program with the
same tools and answers (the SDK's server costs about a second of CPU per start, and
the tests start the stdio fake many times); `build()` here is what it mirrors, and
tests/teams/engine/test_mcp_fakes_agree.py checks that the two agree.

Tools with normal results: echo, add, image (a PNG), env (the values of the variables
named, to prove which ones the server got). Misbehaviours, by tool name: crash (the
call fails; over stdio the process exits mid-call), hang (sleeps past any timeout),
huge (a 5 MB text), invalid schema (`broken` is listed with an input schema that is no
JSON schema), and grow (adds a tool `grown` and says the tool list changed)."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import Tool as MCPTool

from tests.fakes.mcp_stdio import HUGE_CHARS, PNG  # one copy for both fakes


class FakeServer(MCPServer):
    """Lists `broken` with an input schema no validator accepts."""

    async def list_tools(self) -> list[MCPTool]:
        tools = await super().list_tools()
        for tool in tools:
            if tool.name == "broken":
                tool.input_schema = {"type": "object", "properties": {"x": {"type": 12}}}
        return tools


def build(*, crash_exits_process: bool = True) -> FakeServer:
    server = FakeServer("loom-fake")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @server.tool()
    def pid() -> str:
        """The server's process id (to tell a restarted server)."""
        return str(os.getpid())

    @server.tool()
    def env(names: list[str]) -> str:
        """The values of these environment variables, as the server sees them."""
        values = {n: os.environ.get(n) for n in names}
        return "\n".join(
            f"{n}={v} ({len(v)} characters)" if v is not None else f"{n} is unset"
            for n, v in values.items()
        )

    @server.tool()
    def image() -> Image:
        """A tiny PNG."""
        return Image(data=PNG, format="png")

    @server.tool()
    def crash() -> str:
        """The process dies mid-call."""
        if crash_exits_process:
            os._exit(3)
        raise RuntimeError("crashed")

    @server.tool()
    def hang(seconds: float = 3600) -> str:
        """Never answers in time."""
        time.sleep(seconds)
        return "woke up"

    @server.tool()
    def huge() -> str:
        """A 5 MB text."""
        return "x" * HUGE_CHARS

    @server.tool()
    def fail() -> str:
        """A tool error (isError)."""
        raise ToolError("the fake tool failed on purpose")

    @server.tool()
    def broken(x: int = 0) -> str:
        """Listed with an invalid input schema."""
        return "never offered"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Adds the tool `grown` and tells the client the list changed."""

        def grown() -> str:
            """Added later."""
            return "grown"

        if "grown" not in {t.name for t in await server.list_tools()}:
            server.add_tool(grown)
        await ctx.session.send_tool_list_changed()
        return "grew"

    return server


# --- streamable HTTP --------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedInThread:
    """A fake ASGI app served by uvicorn on `self.port` (loopback) in a thread, from
    the start of a `with` block to its end (the MCP and A2A fakes)."""

    what = "the fake server"

    def serve(self, app, **config) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", **config)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.what} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.server.force_exit = True
        self.thread.join(timeout=10)


class McpHttpServer(ServedInThread):
    """The fake on http://127.0.0.1:<port>/mcp, served by uvicorn in a thread.
    `seen_headers` keeps the headers of the requests it got."""

    def __init__(self):
        from starlette.applications import Starlette
        from starlette.middleware import Middleware
        from starlette.middleware.base import BaseHTTPMiddleware

        self.what = "the fake MCP HTTP server"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.seen_headers: list[dict[str, str]] = []
        seen = self.seen_headers

        class Record(BaseHTTPMiddleware):
            async def dispatch(self, request, call_next):
                seen.append(dict(request.headers))
                return await call_next(request)

        self.mcp = build(crash_exits_process=False)
        inner: Any = self.mcp.streamable_http_app()
        app = Starlette(
            routes=inner.routes,
            middleware=[Middleware(Record)],
            lifespan=lambda app: self.mcp.session_manager.run(),
        )
        self.serve(app)
