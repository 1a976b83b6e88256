"""`manage.py team mcp ...`: a team's MCP servers from the shell (an operator's tool,
so stdio servers may be added here).

    team mcp list SLUG
    team mcp add SLUG NAME --stdio [--env NAME]... -- PROGRAM ARG...
    team mcp add SLUG NAME --http URL [--header NAME=VAR]...
        [--approval auto|ask|never] [--role ROLE]... [--phase PHASE]... [--no-refresh]
    team mcp remove SLUG NAME
    team mcp refresh SLUG NAME

Everything after `--` is the command, as given."""

from __future__ import annotations

from django.core.management.base import CommandError, CommandParser

from teams import selectors
from teams.engine import mcp_client
from teams.integrations import mcp_servers
from teams.models import ApprovalPolicy, McpServer

USAGE = (
    "team mcp list SLUG | add SLUG NAME (--stdio [--env NAME]... -- PROGRAM ARG... | "
    "--http URL [--header NAME=VAR]...) [--approval ask] [--role ROLE]... [--phase PHASE]... "
    "| remove SLUG NAME | refresh SLUG NAME"
)


def parser(command) -> CommandParser:
    """The `team mcp` parser, with Django's own options (verbosity...)."""
    parser = CommandParser(
        prog="manage.py team mcp",
        description="A team's MCP servers: " + USAGE,
        called_from_command_line=getattr(command, "_called_from_command_line", None),
    )
    parser.add_argument("mcp_action", choices=["list", "add", "remove", "refresh"])
    parser.add_argument("slug")
    parser.add_argument("server", nargs="?", default="", help="The server's name.")
    parser.add_argument("--stdio", action="store_true", help="Runs the command after --.")
    parser.add_argument("--http", metavar="URL", default="", help="A streamable HTTP server.")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME", help="stdio: pass this variable."
    )
    parser.add_argument(
        "--header", action="append", default=[], metavar="NAME=VAR", help="http: header from VAR."
    )
    parser.add_argument("--approval", choices=ApprovalPolicy.values, default=ApprovalPolicy.ASK)
    parser.add_argument("--role", action="append", default=[], dest="roles")
    parser.add_argument("--phase", action="append", default=[], dest="phases")
    parser.add_argument("--no-refresh", action="store_true", help="add: do not list its tools.")
    parser.add_argument("--verbosity", "-v", type=int, default=1, help="(Django's)")
    for name in ("--settings", "--pythonpath"):
        parser.add_argument(name, default=None, help="(Django's)")
    for flag in ("--traceback", "--no-color", "--force-color", "--skip-checks"):
        parser.add_argument(flag, action="store_true", help="(Django's)")
    parser.set_defaults(action="mcp", text="", name=None)
    return parser


def parse(parser: CommandParser, args: list[str], namespace=None):
    """Everything after `--` is the command: argparse never sees it."""
    args = list(args)
    command: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, command = args[:at], args[at + 1 :]
    options = parser.parse_args(args, namespace)
    options.command = command
    return options


def run(out, options: dict) -> None:
    team = selectors.team_get(slug=options["slug"])
    action, name = options["mcp_action"], options["server"]
    if action == "list":
        servers = list(mcp_servers.mcp_servers_of(team=team))
        if not servers:
            out.write(f"Team {team.slug} has no MCP servers.")
        for server in servers:
            out.write(describe(server))
        return
    if not name:
        raise CommandError(f"Name the server: team mcp {action} {team.slug} NAME.")
    if action == "add":
        server = add(team, name, options)
        if not options["no_refresh"]:
            server = mcp_client.refresh(server)
        out.write(describe(server))
        if not server.healthy:
            raise CommandError(f"Added, but it does not answer: {server.error}")
        return
    server = mcp_servers.mcp_server_get(team=team, name=name)
    if action == "remove":
        mcp_servers.mcp_server_delete(server=server)
        out.write(f"Removed MCP server {name} of team {team.slug}.")
        return
    server = mcp_client.refresh(server)
    out.write(describe(server))
    if not server.healthy:
        raise CommandError(server.error)


def add(team, name: str, options: dict) -> McpServer:
    command = options.get("command") or []
    if options["stdio"] == bool(options["http"]):
        raise CommandError(
            "Say how to reach it: --stdio -- PROGRAM ARG... or --http URL (one of them)."
        )
    if options["stdio"]:
        if not command:
            raise CommandError(
                "Give the command after --: team mcp add SLUG NAME --stdio -- python -m server"
            )
        spec = {"transport": "stdio", "command": command, "env_vars": options["env"]}
    else:
        if command:
            raise CommandError("An HTTP server has no command: drop what follows --.")
        headers = {}
        for pair in options["header"]:
            header, equals, variable = pair.partition("=")
            if not equals or not header or not variable:
                raise CommandError(
                    f"--header takes NAME=VAR (e.g. Authorization=GH_TOKEN): {pair!r}"
                )
            headers[header] = variable
        spec = {"transport": "http", "url": options["http"], "header_vars": headers}
    return mcp_servers.mcp_server_create(
        team=team,
        name=name,
        **spec,
        roles=options["roles"],
        phases=options["phases"],
        approval=options["approval"],
        by_superuser=True,  # an operator on the Loom host
    )


def describe(server: McpServer) -> str:
    where = " ".join(server.command) if server.transport == "stdio" else server.url
    lines = [f"{server.name} ({server.transport}: {where}), approval {server.approval}"]
    if server.env_vars:
        lines.append(f"  variables: {', '.join(server.env_vars)}")
    if server.header_vars:
        lines.append(
            "  headers: " + ", ".join(f"{h} from {v}" for h, v in server.header_vars.items())
        )
    if server.roles or server.phases:
        roles, phases = ", ".join(server.roles) or "all", ", ".join(server.phases) or "all"
        lines.append(f"  roles: {roles}; phases: {phases}")
    lines.append("  health: ok" if server.healthy else f"  health: unhealthy: {server.error}")
    tools = mcp_servers.mcp_server_tools(server=server)
    if server.listed_at is None:
        lines.append("  tools: not listed yet (team mcp refresh)")
    for tool in tools:
        state = f"not offered: {tool['problem']}" if tool["problem"] else tool["policy"]
        lines.append(f"  - {tool['name']} [{state}]")
    return "\n".join(lines)
