"""Fake MCP servers for the tests, written with the official SDK's MCPServer: the same
tools over stdio (`python -m tests.fakes.mcp_stdio`) and over streamable HTTP
(`McpHttpServer`, on a loopback port in a thread).

Tools with normal results: echo, add, image (a PNG), env (the values of the variables
named, to prove which ones the server got). Misbehaviours, by tool name: crash (the
process exits mid-call), hang (sleeps past any timeout), huge (a 5 MB text), invalid
schema (`broken` is listed with an input schema that is no JSON schema), and
grow (adds a tool `grown` and says the tool list changed).

FAKE_MCP_MODE=garbage makes the stdio server print non-protocol lines and never answer."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import Tool as MCPTool

HUGE_CHARS = 5 * 1024 * 1024
# A 1x1 PNG, and its size as the client should report it.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


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


def run_stdio() -> None:
    if os.environ.get("FAKE_MCP_MODE") == "garbage":
        for _ in range(5):
            print("this is not JSON-RPC", flush=True)
        sys.stdin.read()
        return
    build().run()


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


if __name__ == "__main__":
    run_stdio()
