"""Peer tools: direct messages and discovery."""

from pydantic import Field

from teams import services
from teams.models import HUMAN_TEXT_LIMIT, SHORT_TEXT_LIMIT, Agent, Message
from tools.base import Params, Tool, ToolContext
from tools.registry import register


class PeerMessageParams(Params):
    to: str = Field(
        min_length=1, max_length=SHORT_TEXT_LIMIT, description="Name of the recipient agent"
    )
    content: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT, description="Message content")


@register
class PeerMessage(Tool):
    name = "peer_message"
    description = (
        "Send a direct message to a peer agent. They see it on their next turn, not in "
        "the team conversation."
    )
    Params = PeerMessageParams

    def run(self, params: PeerMessageParams, ctx: ToolContext) -> str:
        recipient = ctx.team.agents.filter(name=params.to.lstrip("@")).first()
        if recipient is None:
            names = ", ".join(ctx.team.agents.values_list("name", flat=True))
            return f"No agent named {params.to!r} in this team. Agents: {names}."
        if recipient.id == ctx.agent.id:
            return "You cannot send a message to yourself."
        services.message_add(
            team=ctx.team,
            content=params.content,
            kind=Message.Kind.PEER,
            author=ctx.agent,
            recipient=recipient,
            turn=ctx.turn,
        )
        return f"Message sent to {recipient.name}."


class PeerDiscoveryParams(Params):
    role: str | None = Field(
        default=None,
        max_length=SHORT_TEXT_LIMIT,
        description="Only list agents with this role (e.g. 'coder')",
    )


@register
class PeerDiscovery(Tool):
    name = "peer_discovery"
    writes = False
    description = "List the other agents in your team with their roles, optionally by role."
    Params = PeerDiscoveryParams

    def run(self, params: PeerDiscoveryParams, ctx: ToolContext) -> str:
        agents = ctx.team.agents.exclude(pk=ctx.agent.pk).order_by("position", "id")
        if params.role:
            if params.role not in Agent.Role.values:
                return f"Unknown role {params.role!r}. Roles: {', '.join(Agent.Role.values)}."
            agents = agents.filter(role=params.role)
        rows = [f"- {a.name} ({a.role})" for a in agents]
        if not rows:
            return "No other agents" + (f" with role {params.role}." if params.role else ".")
        return "Agents in your team:\n" + "\n".join(rows)
