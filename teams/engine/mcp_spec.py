"""What one connection to an MCP server needs: the server's settings with its
variables' values, read from its row and Loom's environment now (`Spec`, whose
fingerprint says when a kept connection must start again), and what a call gives back.
Shared by teams.engine.mcp_client (the face) and teams.engine.mcp_runtime (the SDK's side)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from django.conf import settings

from teams.errors import McpUnavailable
from teams.integrations import mcp_servers
from teams.models import McpServer
from tools.base import MAX_RESULT_CHARS

MCP_RESULT_CHARS = MAX_RESULT_CHARS
HIDDEN = "[hidden]"


@dataclass(frozen=True)
class McpCallResult:
    text: str
    is_error: bool


def timeout() -> float:
    return float(settings.LOOM_MCP_TIMEOUT)


# --- what a connection needs ----------------------------------------------------


@dataclass(frozen=True)
class Spec:
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


def spec_of(server: McpServer) -> Spec:
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
    return Spec(
        server_id=server.pk,
        name=server.name,
        transport=server.transport,
        command=tuple(server.command or ()),
        env=env,
        url=server.url,
        headers=headers,
        fingerprint=digest,
    )
