"""A team's MCP servers: settings in, settings with tools and health out. Variable
values are never here, only the names of the variables holding them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from teams.api.schemas.common import In
from teams.integrations import mcp_servers
from teams.models import MCP_NAME_PATTERN, PHASE_NAME_MAX, SHORT_TEXT_LIMIT, McpServer

TransportName = Literal["stdio", "http"]
Part = Annotated[str, Field(max_length=1000)]  # a command's part
Name = Annotated[str, Field(max_length=SHORT_TEXT_LIMIT)]  # a variable, header, role, tool
Policy = Literal["auto", "ask", "never"]
URL_MAX = McpServer._meta.get_field("url").max_length

_COMMAND = "stdio: the program, then its arguments (superusers only: it runs on the Loom host)."
_ENV = "stdio: names of the environment variables passed to it (their values never stored)."
_HEADERS = "http: header name -> name of the variable holding its value."
_ROLES = "Roles whose agents are offered its tools; empty: every role."
_PHASES = "The team's phases in which they are offered; empty: every phase."
_APPROVAL = "auto (run), ask (the PM approves each call) or never (not offered)."
_TOOL_APPROVALS = "Tool name -> auto, ask or never, over the server's approval."


class McpServerIn(In):
    name: str = Field(pattern=MCP_NAME_PATTERN, description="1-32 lowercase letters, digits, -.")
    transport: TransportName
    command: list[Part] = Field([], max_length=mcp_servers.MAX_COMMAND_PARTS, description=_COMMAND)
    env_vars: list[Name] = Field([], max_length=mcp_servers.MAX_VARIABLES, description=_ENV)
    url: str = Field("", max_length=URL_MAX, description="http: an http:// or https:// URL.")
    header_vars: dict[Name, Name] = Field(
        {}, max_length=mcp_servers.MAX_VARIABLES, description=_HEADERS
    )
    roles: list[Name] = Field([], max_length=20, description=_ROLES)
    phases: list[Annotated[str, Field(max_length=PHASE_NAME_MAX)]] = Field(
        [], max_length=100, description=_PHASES
    )
    approval: Policy = Field("ask", description=_APPROVAL)
    tool_approvals: dict[Name, Policy] = Field({}, max_length=200, description=_TOOL_APPROVALS)


class McpServerPatch(In):
    """Only the fields given change; the name stays."""

    transport: TransportName = None
    command: list[Part] = Field(
        None, max_length=mcp_servers.MAX_COMMAND_PARTS, description=_COMMAND
    )
    env_vars: list[Name] = Field(None, max_length=mcp_servers.MAX_VARIABLES, description=_ENV)
    url: str = Field(None, max_length=URL_MAX)
    header_vars: dict[Name, Name] = Field(
        None, max_length=mcp_servers.MAX_VARIABLES, description=_HEADERS
    )
    roles: list[Name] = Field(None, max_length=20, description=_ROLES)
    phases: list[Annotated[str, Field(max_length=PHASE_NAME_MAX)]] = Field(
        None, max_length=100, description=_PHASES
    )
    approval: Policy = Field(None, description=_APPROVAL)
    tool_approvals: dict[Name, Policy] = Field(None, max_length=200, description=_TOOL_APPROVALS)


class McpToolOut(BaseModel):
    name: str
    description: str
    policy: str = Field(description="auto, ask or never: the tool's own, else the server's.")
    problem: str | None = Field(
        description="Why the tool is kept out (an invalid input schema...); null: offered."
    )


class McpServerOut(BaseModel):
    name: str
    transport: str
    command: list[str] = Field(
        description="stdio: as it runs; to a PM without the host's paths (`python -m …`)."
    )
    env_vars: list[Name]
    url: str
    header_vars: dict[str, str]
    roles: list[Name]
    phases: list[Annotated[str, Field(max_length=PHASE_NAME_MAX)]]
    approval: str
    tool_approvals: dict[str, str]
    tools: list[McpToolOut] = Field(description="As last listed (refresh lists them again).")
    listed_at: datetime | None
    healthy: bool
    error: str = Field(description="Why the last connection, listing or call failed; '' healthy.")
    error_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, server: McpServer, *, by_superuser: bool) -> McpServerOut:
        """The server as the caller sees it: a PM sees its command without host paths."""
        return cls(
            name=server.name,
            transport=server.transport,
            command=mcp_servers.mcp_command_shown(server=server, by_superuser=by_superuser),
            env_vars=server.env_vars,
            url=server.url,
            header_vars=server.header_vars,
            roles=server.roles,
            phases=server.phases,
            approval=server.approval,
            tool_approvals=server.tool_approvals,
            tools=[McpToolOut(**t) for t in mcp_servers.mcp_server_tools(server=server)],
            listed_at=server.listed_at,
            healthy=server.healthy,
            error=server.error,
            error_at=server.error_at,
            created_at=server.created_at,
            updated_at=server.updated_at,
        )
