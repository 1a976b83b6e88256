"""Who a team socket tells what: an agent's private lines (its inbox) reach people,
team tokens not bound to an agent, and a token bound to that agent, nobody else."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from teams import services
from teams.models import Message
from teams.web.consumers import team_catch_up
from tests.helpers import make_team, make_user, receive_until, socket

pytestmark = pytest.mark.django_db(transaction=True)


def token_socket(key: str, slug="alpha", after: int = 0):
    """A program's handshake through the whole ASGI stack: a Bearer token, no cookie."""
    from loomsite.asgi import application

    headers = [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {key}".encode())]
    return WebsocketCommunicator(application, f"/ws/teams/{slug}/?after={after}", headers=headers)


def setup_team():
    team = make_team("alpha")
    agents = {a.name: a for a in team.agents.all()}
    coder_key = services.api_token_create(agent=agents["coder"], label="coder program")[1]
    team_key = services.api_token_create(team=team, label="listener")[1]
    return team, agents, coder_key, team_key


def speak(team, agents):
    """A private line to the researcher, one to the coder, then one for the team."""
    services.message_add(
        team=team,
        content="Researcher only: the vendor key is in vault 7.",
        kind=Message.Kind.PEER,
        author=agents["coach"],
        recipient=agents["researcher"],
    )
    services.message_add(
        team=team,
        content="Coder only: take the lexer.",
        kind=Message.Kind.PEER,
        author=agents["coach"],
        recipient=agents["coder"],
    )
    services.message_add(team=team, content="Team: the lexer is next.", author=agents["coach"])


def team_line(event) -> bool:
    return event["event"] == "message.created" and event["message"]["content"].startswith("Team")


def lines(seen):
    return [e["message"]["content"] for e in seen if e["event"] == "message.created"]


async def test_an_agents_socket_gets_no_other_agents_private_line():
    team, agents, coder_key, team_key = await database_sync_to_async(setup_team)()
    root = await database_sync_to_async(make_user)("root", superuser=True)
    sockets = {
        "coder": token_socket(coder_key),
        "team token": token_socket(team_key),
        "pm": socket(root, "/ws/teams/alpha/"),
    }
    for communicator in sockets.values():
        assert (await communicator.connect())[0]
        await receive_until(communicator, lambda e: e["event"] == "team.status")

    await database_sync_to_async(speak)(team, agents)

    everything = [
        "Researcher only: the vendor key is in vault 7.",
        "Coder only: take the lexer.",
        "Team: the lexer is next.",
    ]
    for who, communicator in sockets.items():
        seen = await receive_until(communicator, team_line)
        if who == "coder":
            assert lines(seen) == everything[1:]  # its own line and the team's, not another's
        else:
            assert lines(seen) == everything
        assert all("private_to" not in e for e in seen)
        await communicator.disconnect()


async def test_catch_up_follows_the_same_rule():
    team, agents, coder_key, _ = await database_sync_to_async(setup_team)()
    await database_sync_to_async(speak)(team, agents)
    communicator = token_socket(coder_key)
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status")
    assert "Researcher only: the vendor key is in vault 7." not in lines(seen)
    assert "Team: the lexer is next." in lines(seen)
    await communicator.disconnect()
    # The rule is applied to every event the catch-up holds, whoever reconnects.
    wires, _ = await database_sync_to_async(team_catch_up)(
        team.id, 0, viewer_agent_id=agents["coder"].id
    )
    assert "vault 7" not in str(wires)
