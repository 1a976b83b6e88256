"""The protocol endpoints in front of Django: `/mcp` (teams.mcp.asgi) and `/a2a/`
(teams.a2a.asgi). An endpoint's module, and the SDK it serves with (the MCP and A2A
SDKs: about a second of imports together), is imported at the first request for it,
so a process that is never asked (a turn worker, a management command, a site nobody
calls over MCP) does not pay for it at start."""

from __future__ import annotations

from collections.abc import Callable

from django.utils.module_loading import import_string

MCP_PATH = "/mcp"
A2A_PREFIX = "/a2a/"


def is_mcp_path(path: str) -> bool:
    return path in (MCP_PATH, f"{MCP_PATH}/")


def is_a2a_path(path: str) -> bool:
    return path.startswith(A2A_PREFIX)


class Mount:
    """HTTP requests whose path `matches` go to the `endpoint` (a dotted path to an
    ASGI callable, imported at the first such request); everything else to `app`."""

    def __init__(self, app, *, matches: Callable[[str], bool], endpoint: str):
        self.app, self.matches, self.endpoint = app, matches, endpoint
        self._serve = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.matches(scope.get("path", "")):
            if self._serve is None:
                self._serve = import_string(self.endpoint)
            return await self._serve(scope, receive, send)
        return await self.app(scope, receive, send)
