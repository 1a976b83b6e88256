"""`/a2a/{team}/` on the site: a published team served over the A2A protocol, in front
of Django (as teams.mcp.asgi serves /mcp; loomsite.mounts imports it at the first
request for it).

- `GET /a2a/{team}/.well-known/agent-card.json`: the team's agent card (no token
  needed: publishing a team is its PM's act of showing it). A team that is not
  published, or does not exist, is a 404 either way.
- `POST /a2a/{team}/`: a2a-sdk's JSON-RPC endpoint (SendMessage,
  SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask), answered by
  teams.a2a.handler. The Bearer token is one of the API's (teams.access): a team
  token of that team or an account token of one of its PMs; anything else is "not
  found", as in the REST API. It counts against the caller's LOOM_API_RATE."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from channels.db import database_sync_to_async
from starlette.applications import Starlette

from teams.a2a.handler import TeamRequestHandler
from teams.access import bearer_key, caller_for_key
from teams.api.auth import CallerThrottle
from teams.errors import NotFound, PermissionDenied
from teams.mcp.asgi import UNAUTHENTICATED, _host_allowed, _json
from teams.models import Team

PREFIX = "/a2a/"
PATH = re.compile(r"^/a2a/(?P<team>[a-z0-9][a-z0-9-]*)/(?P<card>\.well-known/agent-card\.json)?$")
NOT_FOUND = "No team published over A2A at this address."
SCHEME = "bearer"


def card_of(team: Team, base_url: str) -> AgentCard:
    """The team's agent card: its goal as the description, one skill per phase."""
    description = team.goal.strip() or f"The Loom team {team.name!r}."
    skills = [
        AgentSkill(
            id=phase,
            name=phase,
            description=f"The team's {phase} phase; a run goes through {', '.join(team.phases)}.",
            tags=["loom", "team", phase],
        )
        for phase in team.phases
    ]
    return AgentCard(
        name=team.name,
        description=description[:2000],
        version="1.0",
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url}{PREFIX}{team.slug}/",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="A Loom API token: a team token of this team, or an "
                    "account token of one of its PMs (manage.py create_api_token).",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList(list=[])})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=skills,
    )


class LoomContext(DefaultServerCallContextBuilder):
    """The SDK's context (the headers it checks A2A-Version against, the extensions
    asked for), with the team and the caller the mount found for the request; the
    token itself stays out of it."""

    def build(self, request) -> ServerCallContext:
        context = super().build(request)
        context.state["headers"].pop("authorization", None)
        context.state.update(request.scope["loom"])
        return context


_app = Starlette(
    routes=create_jsonrpc_routes(
        TeamRequestHandler(), rpc_url="/a2a/{team}/", context_builder=LoomContext()
    )
)



def _published(slug: str) -> Team | None:
    return Team.objects.filter(slug=slug, a2a=True).first()


def _base_url(scope) -> str:
    host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin1")
    return f"{scope.get('scheme', 'http')}://{host}"


async def serve(scope, receive, send) -> None:
    if not _host_allowed(scope):
        return await _json(send, 400, {"detail": "Invalid Host header."})
    match = PATH.match(scope.get("path", ""))
    if match is None:
        return await _json(send, 404, {"detail": NOT_FOUND})
    slug = match["team"]
    if match["card"]:
        if scope["method"] not in ("GET", "HEAD"):
            return await _json(send, 405, {"detail": "The agent card is read with GET."})
        team = await database_sync_to_async(_published)(slug)
        if team is None:
            return await _json(send, 404, {"detail": NOT_FOUND})
        card = agent_card_to_dict(card_of(team, _base_url(scope)))
        return await _json(send, 200, card)
    key = bearer_key(scope.get("headers", []))
    who = await database_sync_to_async(caller_for_key)(key) if key else None
    if who is None:
        return await _json(
            send, 401, {"detail": UNAUTHENTICATED}, headers=[(b"www-authenticate", b"Bearer")]
        )
    throttle = CallerThrottle()
    if not await database_sync_to_async(throttle.allow_request)(SimpleNamespace(auth=who)):
        wait = throttle.wait()
        retry = [(b"retry-after", str(math.ceil(wait)).encode())] if wait is not None else []
        return await _json(send, 429, {"detail": "Too many requests."}, headers=retry)
    try:
        team = await database_sync_to_async(_team_for)(who, slug)
    except NotFound:
        return await _json(send, 404, {"detail": NOT_FOUND})
    except PermissionDenied as exc:
        return await _json(send, 403, {"detail": str(exc)})
    loom = {
        "loom_team": team,
        "loom_label": _label(who),
        "loom_user": who.user,
        "loom_read_only": who.read_only,
    }
    await _app({**scope, "loom": loom}, receive, send)


def _team_for(who, slug: str) -> Team:
    team = who.team(slug)  # NotFound for a team the caller may not see
    if not team.a2a:
        raise NotFound(NOT_FOUND)
    who.require_pm("hire a team over A2A")
    return team


def _label(who) -> str:
    """The run says who hired it: the token's name (or prefix), else the person."""
    if who.token is not None:
        return f"token {who.token.name or who.token.prefix}"
    return who.label
