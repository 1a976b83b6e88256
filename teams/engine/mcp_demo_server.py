"""The MCP server that ships with Loom, for the demo team: harmless tools over stdio,
built with the official SDK's MCPServer.

    python -m teams.engine.mcp_demo_server

Tools: `outline` (the Markdown headings of a text, indented by level) and
`word_count` (words, lines and characters of a text). `register(team)` adds it to a
team as the stdio server "demo" (approval: ask), as `loom_demo` does."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

if TYPE_CHECKING:  # the server itself runs without Django
    from teams.models import McpServer, Team

NAME = "demo"
MODULE = "teams.engine.mcp_demo_server"
MAX_TEXT = 200_000  # characters of a text the tools read
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
# What a model must know of `text`: the content, not a path (it costs output tokens).
Text = Annotated[
    str,
    Field(
        description="The Markdown text itself, not a file path: read a workspace file first "
        f"and pass its content (the first {MAX_TEXT:,} characters are read)."
    ),
]


def outline(text: Text) -> str:
    """The Markdown headings of `text`, indented by level ("(no headings)" if none);
    headings inside fenced code blocks are not headings."""
    lines, fenced = [], False
    for line in text[:MAX_TEXT].splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            lines.append("  " * (len(match.group(1)) - 1) + "- " + match.group(2))
    return "\n".join(lines) or "(no headings)"


def word_count(text: Text) -> str:
    """Words, lines and characters of `text`."""
    text = text[:MAX_TEXT]
    return f"{len(text.split())} words, {len(text.splitlines())} lines, {len(text)} characters"


def build():
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("loom-demo", instructions="Harmless text tools of Loom's demo.")
    server.add_tool(outline)
    server.add_tool(word_count)
    return server


def listing() -> list[dict]:
    """The tools as an MCP client lists them, from this module's server in this process
    (the SDK's in-memory client): the demo server is Loom's own, so `loom_demo` fills its
    row without starting a child Python (about 2 s of CPU, most of it the SDK's imports);
    the team's first call starts the real one over stdio. Runs its loop in a thread of
    its own: a caller may have one running already."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from mcp.client import Client

    from teams.engine.mcp_runtime import listing as listed

    async def list_in_memory() -> list[dict]:
        async with Client(build()) as client:
            return await listed(client, 30)

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, list_in_memory()).result()


def register(team: Team) -> McpServer:
    """The demo server on `team` (made once; the same row again after that)."""
    from teams.integrations import mcp_servers
    from teams.models import McpServer

    existing = McpServer.objects.filter(team=team, name=NAME).first()
    if existing is not None:
        return existing
    return mcp_servers.mcp_server_create(
        team=team,
        name=NAME,
        transport=McpServer.Transport.STDIO,
        command=[sys.executable, "-m", MODULE],
        approval="ask",
        roles=["coder", "reviewer"],  # the ones who write and read the workspace's texts
        by_superuser=True,  # Loom's own program, added by loom_demo on the host
    )


if __name__ == "__main__":
    build().run()
