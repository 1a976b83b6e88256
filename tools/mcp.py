"""Tools of a team's MCP servers, offered as `<server>__<tool>` with the server's own
JSON schema. A class per (server, tool) is built from the server's cached tool list
(McpServer.tools); the engine supplies the call itself (ToolContext.call_mcp), so this
module never talks to a server."""

from __future__ import annotations

import inspect
import re
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from teams.integrations.mcp_servers import SEPARATOR, mcp_offered_tools
from teams.lib import tool_schemas
from teams.models import ApprovalPolicy, McpServer, Team
from tools.base import Tool, ToolContext, ToolResult

# What the Messages API accepts as a tool name.
OFFERED_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DESCRIPTION_MAX = 2000


class McpArguments(BaseModel):
    """Any JSON object: the server's schema (checked in run) decides what fits."""

    model_config = ConfigDict(extra="allow")


class McpTool(Tool):
    """One tool of one MCP server; subclasses are made by `mcp_tools`."""

    Params = McpArguments
    # The call goes over the network (a subprocess or HTTP): no transaction stays
    # open across it, as for a model call.
    calls_model = True
    server_id: ClassVar[int]
    server_name: ClassVar[str]
    remote_name: ClassVar[str]
    schema: ClassVar[dict]
    # Its policy as the server's row said when the class was made (made afresh from
    # the rows for each turn's toolset, so "Always approve" shows on the next one).
    approval: ClassVar[ApprovalPolicy]

    @classmethod
    def _build_definition(cls) -> dict:
        return {"name": cls.name, "description": cls.description, "input_schema": cls.schema}

    @classmethod
    def digest(cls, params: Any, result: ToolResult) -> str:
        outcome = "failed" if result.is_error else "returned"
        arguments = "; ".join(
            f"{key} {' '.join(str(value).split())[:60]}"
            for key, value in params.model_dump().items()
        )
        given = f" ({arguments})" if arguments else ""
        return f"You called {cls.name}{given}; it {outcome}: " + " ".join(result.text.split())[:160]

    def run(self, params: McpArguments, ctx: ToolContext) -> ToolResult:
        if ctx.replayed is not None:  # a replay never calls a server: its record answers
            return ctx.replayed(self.name, ctx.tool_use_id, writes_files=False)
        arguments = params.model_dump()
        try:
            problem = tool_schemas.arguments_problem(arguments, self.schema)
        except tool_schemas.SchemaUnusable as exc:
            text = f"Error: {self.name} cannot be called: its input schema {exc}."
            return ToolResult(text, is_error=True)
        if problem:
            return ToolResult(f"Error: Invalid arguments for {self.name}: {problem}", True)
        server = McpServer.objects.filter(pk=self.server_id, team=ctx.team).first()
        if server is None or ctx.call_mcp is None:
            return ToolResult(f"Error: {self.name} is no longer available.", True)
        # A failure (crash, timeout, garbage) is a LoomError the registry words as
        # "Error: ..."; the server is marked unhealthy by the call itself.
        result = ctx.call_mcp(server, self.remote_name, arguments)
        return ToolResult(result.text, is_error=bool(result.is_error))


_classes: dict[tuple, type[McpTool]] = {}


def offered_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def _tool_class(server: McpServer, entry: dict, policy: str) -> type[McpTool] | None:
    name = offered_name(server.name, entry["name"])
    if not OFFERED_NAME.fullmatch(name):
        return None
    schema = _untitled(entry["input_schema"])
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    description = inspect.cleandoc(entry.get("description") or "")[:DESCRIPTION_MAX]
    key = (
        server.pk,
        name,
        repr(schema),
        description,
        tuple(server.roles),
        tuple(server.phases),
        policy,
    )
    cls = _classes.get(key)
    if cls is None:
        cls = type(
            f"Mcp_{name}",
            (McpTool,),
            {
                "name": name,
                "description": description or f"{entry['name']} of the MCP server {server.name}.",
                "server_id": server.pk,
                "server_name": server.name,
                "remote_name": entry["name"],
                "schema": schema,
                "roles": frozenset(server.roles) or None,
                "phases": frozenset(server.phases) or None,
                "approval": ApprovalPolicy(policy),
                "__module__": __name__,
            },
        )
        _classes[key] = cls
    return cls


def _untitled(schema: dict) -> dict:
    """The schema without the generated "title" keys (as built-in tools' are): noise."""
    schema = {k: v for k, v in schema.items() if k != "title"}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        schema["properties"] = {
            name: {k: v for k, v in prop.items() if k != "title"}
            if isinstance(prop, dict)
            else prop
            for name, prop in properties.items()
        }
    return schema


def mcp_tools(team: Team) -> list[type[McpTool]]:
    """The team's MCP tools as their servers last listed them (teams.integrations.mcp_servers keeps
    out tools with a problem and `never` ones); roles and phases are checked per agent
    like any tool's (Tool.access: the server's, or the team's tool_access)."""
    if team is None or team.pk is None:
        return []
    offered = mcp_offered_tools(team=team)
    tools = (_tool_class(server, entry, policy) for server, entry, policy in offered)
    return [cls for cls in tools if cls is not None]
