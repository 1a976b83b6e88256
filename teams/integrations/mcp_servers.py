"""A team's MCP servers: made, changed, deleted and their tool lists recorded here;
teams.engine.mcp_client talks to them.

A server runs a command on the Loom host (stdio) or is reached at a URL (streamable
HTTP). Making or changing a stdio server's command, variables or transport is a
superuser's: it runs a program on the host. Environment and header values are never
stored, only the names of the variables holding them; the runtime reads them from
Loom's environment when it connects.

The tools a server lists are kept on its row (McpServer.tools) with each tool's
problem, if any: a tool whose input schema is no JSON-schema object, or whose name a
model could not call, is kept out of what agents are offered, with the reason."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from teams.errors import Conflict, InvalidInput, NotFound, PermissionDenied, integrity_as, validated
from teams.lib import outbound, tool_schemas
from teams.models import ENV_NAME_PATTERN, AgentRole, ApprovalPolicy, McpServer, Team
from teams.run import locks
from teams.stamps import RowsJson

Transport = McpServer.Transport

MAX_MCP_SERVERS_PER_TEAM = 20
MAX_COMMAND_PARTS = 100
MAX_COMMAND_PART_CHARS = 1000
MAX_VARIABLES = 50
MAX_TOOLS = 200  # of one server's listing; the rest are kept out, with the reason
MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_CHARS = 20_000  # of one tool's input schema, as JSON
ERROR_CHARS = 1000  # of a health error kept on the row
# A model's tool name is at most 64 of these; Loom offers `<server>__<tool>`.
TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
OFFERED_NAME_MAX = 64
SEPARATOR = "__"
HEADER_NAME_PATTERN = re.compile(r"^[A-Za-z0-9-]{1,100}$")
ENV_NAME = re.compile(ENV_NAME_PATTERN)
# Loom's own settings and secrets are never handed to a server.
REFUSED_VARIABLE_PREFIXES = ("LOOM_", "DJANGO_")
REFUSED_VARIABLES = {"ANTHROPIC_API_KEY"}

MCP_SETTINGS = (
    "transport",
    "command",
    "env_vars",
    "url",
    "header_vars",
    "roles",
    "phases",
    "approval",
    "tool_approvals",
)
# What only a superuser may set on a stdio server: what runs, and with what.
STDIO_SETTINGS = ("transport", "command", "env_vars")
STDIO_REFUSED = (
    "Only a superuser may add a stdio MCP server or change its command or variables: "
    "it runs a program on the Loom host. Add a streamable HTTP server instead."
)


# --- checks ----------------------------------------------------------------------


def _string_list(value, field: str, *, most: int) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{field} is a list of strings.", field=field)
    if len(value) > most:
        raise InvalidInput(f"{field} has at most {most} entries.", field=field)
    return [str(v) for v in value]


def _variable(name, field: str) -> str:
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise InvalidInput(
            f"{name!r} is not an environment variable's name (capital letters, digits and "
            "underscores, e.g. GITHUB_TOKEN).",
            field=field,
        )
    if name.startswith(REFUSED_VARIABLE_PREFIXES) or name in REFUSED_VARIABLES:
        raise InvalidInput(
            f"{name} is one of Loom's own settings; it is never passed to an MCP server.",
            field=field,
        )
    return name


def _policy(value, field: str) -> str:
    if value not in ApprovalPolicy.values:
        raise InvalidInput(f"{value!r} is not an approval policy: auto, ask or never.", field=field)
    return value


def _check(server: McpServer) -> None:
    """Every rule of a server's settings; the other transport's settings are cleared."""
    validated(server, exclude=["team", "tools", "listed_at", "error", "error_at"])
    if server.transport == Transport.STDIO:
        _check_stdio(server)
    else:
        _check_http(server)
    _check_reach(server)
    _check_approvals(server)


def _check_stdio(server: McpServer) -> None:
    command = _string_list(server.command, "command", most=MAX_COMMAND_PARTS)
    if not command or not command[0].strip():
        raise InvalidInput(
            "A stdio server needs its command: the program, then its arguments.",
            field="command",
        )
    for part in command:
        if "\x00" in part or len(part) > MAX_COMMAND_PART_CHARS:
            raise InvalidInput(
                f"Each part of the command is at most {MAX_COMMAND_PART_CHARS} "
                "characters, without NUL.",
                field="command",
            )
    env_vars = _string_list(server.env_vars, "env_vars", most=MAX_VARIABLES)
    server.command = command
    server.env_vars = list(dict.fromkeys(_variable(n, "env_vars") for n in env_vars))
    server.url, server.header_vars = "", {}


def _check_http(server: McpServer) -> None:
    url = (server.url or "").strip()
    parts = urlsplit(url) if url and not any(c.isspace() or c == "\x00" for c in url) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            "A streamable HTTP server needs its URL: http:// or https://, with a host.",
            field="url",
        )
    try:  # the outbound guard: no private address (as webhooks and consultants)
        outbound.check_url(url)
    except outbound.Refused as exc:
        raise InvalidInput(f"This URL is not used: {exc.reason}.", field="url") from None
    headers = server.header_vars if server.header_vars is not None else {}
    if not isinstance(headers, dict) or len(headers) > MAX_VARIABLES:
        raise InvalidInput(
            f"header_vars maps at most {MAX_VARIABLES} header names to variable names.",
            field="header_vars",
        )
    for header, variable in headers.items():
        if not isinstance(header, str) or not HEADER_NAME_PATTERN.match(header):
            raise InvalidInput(
                f"{header!r} is not a header name (letters, digits and dashes).",
                field="header_vars",
            )
        _variable(variable, "header_vars")
    server.url, server.header_vars = url, dict(headers)
    server.command, server.env_vars = [], []


def _check_reach(server: McpServer) -> None:
    """Who may use its tools: roles and phases."""
    roles = _string_list(server.roles, "roles", most=len(AgentRole.values))
    for role in roles:
        if role not in AgentRole.values:
            raise InvalidInput(
                f"{role!r} is not a role: {', '.join(AgentRole.values)}.", field="roles"
            )
    phases = _string_list(server.phases, "phases", most=100)
    for phase in phases:
        if phase not in server.team.phases:
            raise InvalidInput(
                f"Team {server.team.slug!r} has no phase {phase!r} "
                f"(its phases: {', '.join(server.team.phases)}).",
                field="phases",
            )
    server.roles, server.phases = list(dict.fromkeys(roles)), list(dict.fromkeys(phases))


def _check_approvals(server: McpServer) -> None:
    _policy(server.approval, "approval")
    approvals = server.tool_approvals if server.tool_approvals is not None else {}
    if not isinstance(approvals, dict) or len(approvals) > MAX_TOOLS:
        raise InvalidInput(
            f"tool_approvals maps at most {MAX_TOOLS} tool names to auto, ask or never.",
            field="tool_approvals",
        )
    for tool, policy in approvals.items():
        if not isinstance(tool, str) or not TOOL_NAME_PATTERN.match(tool):
            raise InvalidInput(f"{tool!r} is not a tool's name.", field="tool_approvals")
        _policy(policy, "tool_approvals")
    server.tool_approvals = dict(approvals)


HEADER_VARS_REFUSED = (
    "Only a superuser may name variables for an HTTP server's headers: their values are "
    "the Loom host's own secrets, sent to the server's URL."
)


REPOINT_REFUSED = (
    "Only a superuser may change where MCP server {name!r} connects (its URL or "
    "transport): it sends the Loom host's own secrets ({variables}) there. To point it "
    "elsewhere without them, clear header_vars in the same change."
)


def host_variables(server: McpServer) -> list[str]:
    """The names of the host's variables whose values the server is given."""
    return [*(server.env_vars or []), *(server.header_vars or {}).values()]


def _host_secrets_allowed(
    *, before: McpServer | None, after: McpServer, by_superuser: bool
) -> None:
    """A PM's HTTP server gets no header values from the host's environment: naming
    AWS_SECRET_ACCESS_KEY would send it to a URL of the PM's choosing. Nor may a PM
    re-point a server a superuser gave variables: the values would follow the URL."""
    if by_superuser:
        return
    if after.header_vars and (before is None or before.header_vars != after.header_vars):
        raise PermissionDenied(HEADER_VARS_REFUSED)
    if before is None or not host_variables(before) or not host_variables(after):
        return
    moved = (after.url or "").strip() != before.url or after.transport != before.transport
    if moved:
        raise PermissionDenied(
            REPOINT_REFUSED.format(
                name=before.name, variables=", ".join(sorted(set(host_variables(before))))
            )
        )


def _stdio_allowed(*, before: McpServer | None, after: McpServer, by_superuser: bool) -> None:
    _host_secrets_allowed(before=before, after=after, by_superuser=by_superuser)
    if by_superuser:
        return
    if before is None:
        if after.transport == Transport.STDIO:
            raise PermissionDenied(STDIO_REFUSED)
        return
    stdio = Transport.STDIO in (before.transport, after.transport)
    changed = any(getattr(before, f) != getattr(after, f) for f in STDIO_SETTINGS)
    if stdio and changed:
        raise PermissionDenied(STDIO_REFUSED)


def mcp_server_check(*, server: McpServer, before: McpServer | None, by_superuser: bool) -> None:
    """Every rule a save would apply to `server` (unsaved; `before` is the saved row, or
    None for a new one): raises InvalidInput or PermissionDenied. The admin's form
    uses it to show the problem on the field."""
    if server.transport not in Transport.values:
        raise InvalidInput(
            f"{server.transport!r} is not a transport: stdio or http.", field="transport"
        )
    _stdio_allowed(before=before, after=server, by_superuser=by_superuser)
    _check(server)


# --- services --------------------------------------------------------------------


@transaction.atomic
def mcp_server_create(
    *,
    team: Team,
    name: str,
    transport: str,
    command: list[str] | None = None,
    env_vars: list[str] | None = None,
    url: str = "",
    header_vars: dict[str, str] | None = None,
    roles: list[str] | None = None,
    phases: list[str] | None = None,
    approval: str = ApprovalPolicy.ASK,
    tool_approvals: dict[str, str] | None = None,
    by_superuser: bool = False,
) -> McpServer:
    """A new MCP server of the team, its tools not yet listed (the faces then refresh
    it through teams.engine.mcp_client.refresh)."""
    server = McpServer(
        team=team,
        name=name,
        transport=transport,
        command=list(command or []),
        env_vars=list(env_vars or []),
        url=url or "",
        header_vars=dict(header_vars or {}),
        roles=list(roles or []),
        phases=list(phases or []),
        approval=approval,
        tool_approvals=dict(tool_approvals or {}),
    )
    mcp_server_check(server=server, before=None, by_superuser=by_superuser)
    team = locks.team_lock(team)  # one count at a time
    if McpServer.objects.filter(team=team).count() >= MAX_MCP_SERVERS_PER_TEAM:
        raise Conflict(
            f"Team {team.slug!r} has {MAX_MCP_SERVERS_PER_TEAM} MCP servers already, the most "
            "it may have; delete one first."
        )
    duplicate = Conflict(f"Team {team.slug!r} already has an MCP server {name!r}.", field="name")
    if McpServer.objects.filter(team=team, name=name).exists():
        raise duplicate
    with integrity_as(duplicate):
        server.save()
    return server


@transaction.atomic
def mcp_server_update(*, server: McpServer, changes: dict, by_superuser: bool = False) -> McpServer:
    """Change some of a server's settings (MCP_SETTINGS); its name stays. A change of
    what it runs or where it is forgets the tools listed before (refresh it then)."""
    unknown = set(changes) - set(MCP_SETTINGS)
    if unknown:
        raise InvalidInput(f"Unknown MCP server settings: {', '.join(sorted(unknown))}.")
    before = McpServer.objects.select_for_update().filter(pk=server.pk).first()
    if before is None:
        raise NotFound(f"MCP server {server.name!r} was deleted meanwhile.")
    after = McpServer.objects.get(pk=server.pk)
    for field, value in changes.items():
        setattr(after, field, value)
    mcp_server_check(server=after, before=before, by_superuser=by_superuser)
    if connection_fingerprint(before) != connection_fingerprint(after):
        after.tools, after.listed_at = [], None
    after.save()
    return after


@transaction.atomic
def mcp_server_delete(*, server: McpServer) -> None:
    McpServer.objects.filter(pk=server.pk).delete()


COPIED_FIELDS = (*MCP_SETTINGS, "name", "tools", "listed_at")
WITHOUT_VARIABLES = (
    "MCP server(s) {names} came without the Loom host's variables they were given "
    "(header_vars, env_vars): only a superuser names them again."
)


def mcp_servers_copy(*, source: Team, target: Team, by_superuser: bool) -> list[str]:
    """Copy the source team's servers to the target (a fork or a clone). A copy made by
    a PM keeps no host variables: the PM could re-point the copy and carry their values
    away. Returns the names of the servers copied without them."""
    stripped = []
    for server in McpServer.objects.filter(team=source).order_by("name"):
        values = {f: getattr(server, f) for f in COPIED_FIELDS}
        if not by_superuser and host_variables(server):
            values.update(env_vars=[], header_vars={})
            stripped.append(server.name)
        McpServer.objects.create(team=target, **values)
    return stripped


def mcp_servers_stripped(*, source: Team | None, copy: Team) -> list[str]:
    """The servers of `copy` that came from `source` without their host variables."""
    if source is None:
        return []
    given = {s.name for s in McpServer.objects.filter(team=source) if host_variables(s)}
    return sorted(
        s.name for s in McpServer.objects.filter(team=copy, name__in=given) if not host_variables(s)
    )


# Where a program or file lies on the host (a part of a command, or what follows its
# "="): the host's layout is not a PM's to see, so a PM is shown the last part only.
HOST_PATH = re.compile(r"(^|=)(?:~|[A-Za-z]:)?[/\\](?:[^/\\=]*[/\\])*")


def mcp_command_shown(*, server: McpServer, by_superuser: bool) -> list[str]:
    """A stdio server's command as the caller is shown it: whole for a superuser; for a
    PM without the host's paths (the demo's `/srv/loom/.venv/bin/python -m …` is
    `python -m …`). The stored command, which runs, keeps them."""
    command = list(server.command or [])
    if by_superuser:
        return command
    return [program_shown(part) for part in command]


def program_shown(part: str) -> str:
    """One part of a command without the host's paths in it."""
    return HOST_PATH.sub(r"\1", part) or "…"


def connection_fingerprint(server: McpServer) -> str:
    """What a connection to the server depends on (the runtime restarts one whose
    fingerprint changed). Variable names only: their values are added by the runtime."""
    return json.dumps(
        [server.transport, server.command, server.env_vars, server.url, server.header_vars],
        sort_keys=True,
    )


# --- tool listings and health -------------------------------------------------------


def schema_problem(schema) -> str | None:
    """Why an input schema cannot be offered to a model, or None."""
    if not isinstance(schema, dict):
        return "its input schema is not a JSON object"
    if schema.get("type") != "object":
        return 'its input schema is not of "type": "object"'
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError):
        return "its input schema is not JSON"
    if size > MAX_SCHEMA_CHARS:
        return f"its input schema has {size:,} characters, over the {MAX_SCHEMA_CHARS:,} allowed"
    problem = tool_schemas.schema_problem(schema)
    return f"its input schema {problem}" if problem else None


def listed_tools(*, server: McpServer, tools: list[dict]) -> list[dict]:
    """A listing as kept on the row: name, description, input_schema for a tool that
    may be offered; name, description, problem for one kept out."""
    kept, seen = [], set()
    for index, tool in enumerate(tools):
        name = str(tool.get("name") or "")[:100]
        description = str(tool.get("description") or "")[:MAX_DESCRIPTION_CHARS]
        problem = None
        if index >= MAX_TOOLS:
            problem = f"the server lists more than {MAX_TOOLS} tools"
        elif not TOOL_NAME_PATTERN.match(name):
            problem = "its name is not 1-64 letters, digits, dashes or underscores"
        elif len(server.name) + len(SEPARATOR) + len(name) > OFFERED_NAME_MAX:
            problem = (
                f"{server.name}{SEPARATOR}{name} is over {OFFERED_NAME_MAX} characters, "
                "too long for a model's tool name"
            )
        elif name in seen:
            problem = "the server lists it twice"
        else:
            problem = schema_problem(tool.get("input_schema"))
        seen.add(name)
        entry = {"name": name, "description": description}
        if problem:
            entry["problem"] = problem
        else:
            entry["input_schema"] = tool["input_schema"]
        kept.append(entry)
        if index >= MAX_TOOLS * 2:  # a runaway listing: stop recording it
            break
    return kept


def mcp_server_record_tools(*, server: McpServer, tools: list[dict]) -> McpServer:
    """Keep a fresh listing (each tool checked) and mark the server healthy. The new
    listed_at is what tells a process that kept the team's tools (mcp_servers_stamp)
    that they changed."""
    server.tools = listed_tools(server=server, tools=tools)
    server.listed_at = timezone.now()
    server.error, server.error_at = "", None
    McpServer.objects.filter(pk=server.pk).update(
        tools=server.tools, listed_at=server.listed_at, error="", error_at=None
    )
    return server


def mcp_server_record_failure(*, server: McpServer, error: str) -> None:
    """Mark the server unhealthy, saying why (no secret is in `error`: the runtime
    hides variable values before it gets here)."""
    server.error, server.error_at = (error or "failed")[:ERROR_CHARS], timezone.now()
    McpServer.objects.filter(pk=server.pk).update(error=server.error, error_at=server.error_at)


def mcp_server_record_success(*, server: McpServer) -> None:
    """A call went through: the server is healthy again (one read when it already was)."""
    if McpServer.objects.filter(pk=server.pk).exclude(error="").exists():
        McpServer.objects.filter(pk=server.pk).update(error="", error_at=None)
    server.error, server.error_at = "", None


# --- selectors -------------------------------------------------------------------


def mcp_servers_of(*, team: Team) -> QuerySet[McpServer]:
    return McpServer.objects.filter(team=team).order_by("name")


def mcp_servers_stamp(*, team_id) -> RowsJson:
    """A stamp (teams.stamps) of what the team's servers offer (mcp_offered_tools), for
    a turn's claim (`team_id`: an OuterRef). Its tool lists are too large to carry:
    every change of a row moves its updated_at (save), and a new listing its listed_at
    (mcp_server_record_tools)."""
    return RowsJson(
        McpServer.objects.filter(team_id=team_id).order_by("name"),
        "id",
        "name",
        "roles",
        "phases",
        "approval",
        "tool_approvals",
        "updated_at",
        "listed_at",
    )


def mcp_server_get(*, team: Team, name: str) -> McpServer:
    server = (
        McpServer.objects.filter(team=team, name=name).first()
        if isinstance(name, str) and len(name) <= 32
        else None
    )
    if server is None:
        raise NotFound(f"Team {team.slug!r} has no MCP server {name!r}.")
    return server


def mcp_tool_policy(*, server: McpServer, tool_name: str) -> str:
    """auto, ask or never: the tool's own policy, else the server's."""
    return (server.tool_approvals or {}).get(tool_name) or server.approval


def mcp_server_tools(*, server: McpServer) -> list[dict]:
    """The server's listed tools with their policies: name, description, policy,
    problem (None for a tool that may be offered)."""
    return [
        {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "policy": mcp_tool_policy(server=server, tool_name=tool["name"]),
            "problem": tool.get("problem"),
        }
        for tool in server.tools or []
    ]


def mcp_offered_tools(
    *, team: Team, role: str | None = None, phase: str | None = None
) -> list[tuple[McpServer, dict, str]]:
    """(server, tool, policy) for every tool an agent of `role` in `phase` may be
    offered: its server serves that role and phase, the tool has no problem, and its
    policy is not never. `tool` has name, description and input_schema."""
    offered = []
    for server in mcp_servers_of(team=team):
        if server.roles and role is not None and role not in server.roles:
            continue
        if server.phases and phase is not None and phase not in server.phases:
            continue
        for tool in server.tools or []:
            if tool.get("problem") or "input_schema" not in tool:
                continue
            policy = mcp_tool_policy(server=server, tool_name=tool["name"])
            if policy != ApprovalPolicy.NEVER:
                offered.append((server, tool, policy))
    return offered
