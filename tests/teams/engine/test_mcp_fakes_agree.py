"""The two fake MCP servers agree: the light stdio one (tests/fakes/mcp_stdio.py, no SDK)
lists and answers as the SDK's server of tests.fakes.mcp_servers does over HTTP, seen
through the real SDK client as Loom uses it (mode="legacy")."""

import asyncio
from contextlib import asynccontextmanager

import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import FAKE_MCP_COMMAND

CALLS = [
    ("echo", {"text": "hello, ünïcode"}),
    ("add", {"a": 2, "b": 3}),
    ("image", {}),
    ("fail", {}),
    ("no_such_tool", {}),
]


@asynccontextmanager
async def _session(url: str | None):
    """A client of the HTTP fake at `url`, or of the stdio fake when it is None."""
    if url is None:
        program, *args = FAKE_MCP_COMMAND
        transport = stdio_client(StdioServerParameters(command=program, args=args))
        async with Client(transport, mode="legacy", read_timeout_seconds=20) as client:
            yield client
        return
    async with httpx2.AsyncClient(trust_env=False) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", read_timeout_seconds=20) as client:
            yield client


def _seen(url: str | None) -> dict:
    """What a client sees of a fake: its handshake, listing and the CALLS' results."""

    async def seeing():
        async with _session(url) as client:
            listed = (await client.list_tools()).tools
            calls = [await client.call_tool(name, arguments) for name, arguments in CALLS]
            return {
                "protocol_version": client.protocol_version,
                "server_info": client.server_info.model_dump(),
                "capabilities": client.server_capabilities.model_dump(),
                "tools": [t.model_dump(by_alias=True, exclude_none=True) for t in listed],
                "calls": [c.model_dump(by_alias=True, exclude_none=True) for c in calls],
            }

    return asyncio.run(seeing())


def test_the_stdio_fake_lists_and_answers_as_the_sdks_server_does(mcp_http):
    over_stdio, over_http = _seen(None), _seen(mcp_http.url)
    assert [t["name"] for t in over_stdio["tools"]] == [t["name"] for t in over_http["tools"]]
    assert over_stdio["tools"] == over_http["tools"]  # descriptions and schemas too
    assert over_stdio["calls"] == over_http["calls"]
    assert over_stdio == over_http
    image, failed = over_stdio["calls"][2], over_stdio["calls"][3]
    assert image["content"][0]["mimeType"] == "image/png" and not image["isError"]
    assert failed["isError"] and "failed on purpose" in failed["content"][0]["text"]
