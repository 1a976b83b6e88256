"""A team's MCP servers (the PM's): list, add, change, delete, and list a server's
tools again. A stdio server runs a command on the Loom host: only a superuser may add
one or change what it runs; a PM adds streamable HTTP servers."""

from ninja import Router, Status

from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.mcp_servers import McpServerIn, McpServerOut, McpServerPatch
from teams.engine import mcp_client
from teams.integrations import mcp_servers
from teams.models import McpServer, Team

router = Router(tags=["mcp-servers"])


def _pm_team(request, team: str, doing: str, *, person: bool = False) -> tuple[Team, bool]:
    """The team, for its PM, and whether the caller is a superuser. Adding, changing or
    deleting a server takes a person: header values are read from Loom's environment,
    and a leaked team token must not choose where they are sent."""
    who = caller(request)
    row = who.team(team)
    who.require_pm(doing)
    if person:
        who.require_person(doing)
    return row, bool(who.user is not None and who.user.is_superuser)


def _server(team: Team, name: str) -> McpServer:
    return mcp_servers.mcp_server_get(team=team, name=name)


@router.get(
    "/teams/{team}/mcp-servers",
    response=responses({200: list[McpServerOut]}, 404),
    operation_id="mcp_servers_list",
)
def mcp_servers_list(request, team: str):
    """The team's MCP servers by name, each with its tools, their policies and its health."""
    row, superuser = _pm_team(request, team, "see the team's MCP servers")
    servers = mcp_servers.mcp_servers_of(team=row)
    return [McpServerOut.of(s, by_superuser=superuser) for s in servers]


@router.post(
    "/teams/{team}/mcp-servers",
    response=responses({201: McpServerOut}, 400, 404, 409),
    operation_id="mcp_servers_create",
)
def mcp_servers_create(request, team: str, payload: McpServerIn):
    """Add an MCP server (stdio: superusers only, 403 otherwise). A stdio server's tools
    are listed at once (within LOOM_MCP_TIMEOUT): the answer lists them, or says in
    `error` why they could not be. An HTTP server's are listed when the team's next
    turn begins (POST .../refresh lists them now): either way the team's next turn
    offers them, with no refresh."""
    row, superuser = _pm_team(request, team, "add MCP servers", person=True)
    server = mcp_servers.mcp_server_create(team=row, **payload.model_dump(), by_superuser=superuser)
    return Status(201, McpServerOut.of(mcp_client.list_at_once(server), by_superuser=superuser))


@router.get(
    "/teams/{team}/mcp-servers/{name}",
    response=responses({200: McpServerOut}, 404),
    operation_id="mcp_servers_get",
)
def mcp_servers_get(request, team: str, name: str):
    row, superuser = _pm_team(request, team, "see the team's MCP servers")
    return McpServerOut.of(_server(row, name), by_superuser=superuser)


@router.patch(
    "/teams/{team}/mcp-servers/{name}",
    response=responses({200: McpServerOut}, 400, 404),
    operation_id="mcp_servers_update",
)
def mcp_servers_update(request, team: str, name: str, payload: McpServerPatch):
    """Change some settings; only the fields given change. A stdio server's command,
    variables or transport are a superuser's to change (403 otherwise). A change of
    what it runs or where it is lists its tools again (as POST does)."""
    row, superuser = _pm_team(request, team, "change MCP servers", person=True)
    server = mcp_servers.mcp_server_update(
        server=_server(row, name),
        changes=payload.model_dump(exclude_unset=True),
        by_superuser=superuser,
    )
    return McpServerOut.of(mcp_client.list_at_once(server), by_superuser=superuser)


@router.delete(
    "/teams/{team}/mcp-servers/{name}",
    response=responses({204: None}, 404),
    operation_id="mcp_servers_delete",
)
def mcp_servers_delete(request, team: str, name: str):
    """Delete the server: its tools are no longer offered."""
    row, _ = _pm_team(request, team, "delete MCP servers", person=True)
    mcp_servers.mcp_server_delete(server=_server(row, name))
    return Status(204, None)


@router.post(
    "/teams/{team}/mcp-servers/{name}/refresh",
    response=responses({200: McpServerOut}, 404),
    operation_id="mcp_servers_refresh",
)
def mcp_servers_refresh(request, team: str, name: str):
    """Connect to the server and list its tools again (within LOOM_MCP_TIMEOUT). A
    server that fails keeps its last listing and is answered unhealthy, saying why."""
    row, superuser = _pm_team(request, team, "refresh MCP servers")
    return McpServerOut.of(mcp_client.refresh(_server(row, name)), by_superuser=superuser)
