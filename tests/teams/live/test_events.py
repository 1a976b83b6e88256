"""Live events: each declared event reaches the sockets of its audience, and only
those, and no event closes a socket; an undeclared event is refused loudly."""

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from teams import services
from teams.conversation import pm_requests, questions
from teams.live import events
from teams.live.event_payloads import MessageOut, PMRequestOut, QueryOut, TeamStatusOut, TurnOut
from teams.live.events import Audience
from teams.models import Query, Turn
from teams.run import team_actions
from tests.helpers import (
    drain,
    forward_chain_script,
    make_team,
    make_turn,
    make_user,
    receive_until,
    socket,
)

pytestmark = pytest.mark.django_db(transaction=True)


def make_world():
    """A team with one of each row an event describes, and its PM."""
    team = make_team("alpha")
    coach = team.agents.get(name="coach")
    message = services.message_add(team=team, content="Hello.", author=coach)
    turn = make_turn(coach, number=1)
    request = pm_requests.pm_request_open(team=team, agent=coach, question="HTML or PDF?")
    query = questions.ask(team=team, origin=coach, question="Which parser?", target="coder")
    pm = make_user("alice", manages=[team])
    rows = {"message": message, "turn": turn, "request": request, "query": query}
    return team, pm, {**rows, **panel_rows(team)}


def sample(event_type: type[events.Event], team, rows) -> events.Event:
    """One value of each declared event, built from real rows."""
    status = TeamStatusOut.of(team)
    request = PMRequestOut.of(rows["request"])
    query = QueryOut.of(Query.objects.get(pk=rows["query"].pk))
    turn = Turn.objects.select_related("agent").get(pk=rows["turn"].pk)
    values = {
        events.TeamStatusChanged: lambda: events.TeamStatusChanged.of(team),
        events.TeamProgress: lambda: events.TeamProgress.of(team),
        events.TurnStarted: lambda: events.TurnStarted(turn_id=turn.id, agent="coach", number=1),
        events.TextDelta: lambda: events.TextDelta(turn_id=turn.id, agent="coach", text="Hel"),
        events.MessageCreated: lambda: events.MessageCreated(
            message=MessageOut.of(rows["message"])
        ),
        events.TurnFinished: lambda: events.TurnFinished(turn=TurnOut.of(turn), team=status),
        events.PMRequestOpened: lambda: events.PMRequestOpened(request=request),
        events.PMRequestAnswered: lambda: events.PMRequestAnswered(request=request),
        events.PMRequestOpenList: lambda: events.PMRequestOpenList(requests=[request]),
        events.QueryAsked: lambda: events.QueryAsked(query=query),
        events.QueryForwarded: lambda: events.QueryForwarded(query=query),
        events.QueryAnswered: lambda: events.QueryAnswered(query=query),
        events.QueryExpired: lambda: events.QueryExpired(query=query),
        events.BudgetWarning: lambda: events.BudgetWarning(
            team=team.slug, team_id=team.id, budget="turns", used=160, limit=200, percent=80.0
        ),
        **panel_samples(rows),
        events.NextSpeakerChosen: lambda: events.NextSpeakerChosen(agent="coder", by="pm"),
        events.AgentNudged: lambda: events.AgentNudged(agent="coder", by="pm"),
        events.SeatTaken: lambda: events.SeatTaken(agent="coder", by="pm", turn_id=turn.id),
        events.DriftAlert: lambda: events.DriftAlert(
            team=team.slug,
            team_id=team.id,
            agent="coder",
            score=25,
            scores=[30, 25],
            text="coder is in significant drift.",
        ),
    }
    # A new event must get a sample here, so this test covers it.
    assert set(values) == set(events.DECLARED.values()), "give the new event a sample"
    return values[event_type]()


def panel_rows(team) -> dict:
    """The rows the live view's panel events describe (tests/teams/test_panel_events.py
    covers when each is published)."""
    from teams.models import WorkspaceFile
    from tests.helpers import make_consultation

    coach = team.agents.get(name="coach")
    consultation = make_consultation(coach, prompt="Is the plan sound?")
    return {
        "anchor": services.anchor_save(team=team, key="db", value="PostgreSQL"),
        "keeper": team.keepers.create(agent=coach, topic="early talk"),
        "batch": {
            "batch": consultation.batch,
            "agent": "coach",
            "turn": None,
            "prompt": "Is the plan sound?",
            "consultations": [consultation],
        },
        "file": WorkspaceFile.objects.create(team=team, path="notes.md", size=5, agent=coach),
        "coach": coach,
    }


def panel_samples(rows) -> dict:
    from teams.live.event_payloads import (
        AnchorOut,
        ConsultationBatchOut,
        KeeperOut,
        WorkspaceFileOut,
    )

    return {
        events.ConsultationClosed: lambda: events.ConsultationClosed(
            batch=ConsultationBatchOut.of(rows["batch"])
        ),
        events.FileWritten: lambda: events.FileWritten(
            file=WorkspaceFileOut.of(rows["file"]), files=1
        ),
        events.AnchorSaved: lambda: events.AnchorSaved(
            anchor=AnchorOut.of(rows["anchor"]), anchors=1
        ),
        events.AnchorDeleted: lambda: events.AnchorDeleted(key="db", anchors=0),
        events.KeeperCreated: lambda: events.KeeperCreated(keeper=KeeperOut.of(rows["keeper"], 3)),
        events.AgentIntentChanged: lambda: events.AgentIntentChanged.of(rows["coach"]),
    }


async def test_every_declared_event_reaches_its_audience_and_no_socket_closes():
    team, pm, rows = await database_sync_to_async(make_world)()
    team_socket = socket(pm, f"/ws/teams/{team.slug}/?after={rows['message'].id}")
    inbox_socket = socket(pm, "/ws/pm/")
    assert (await team_socket.connect())[0] and (await inbox_socket.connect())[0]
    await receive_until(team_socket, lambda e: e["event"] == "team.status")
    first = await inbox_socket.receive_json_from(timeout=5)
    assert first["event"] == "pm_request.open_list" and len(first["requests"]) == 1

    marker = events.PMRequestOpened(request=PMRequestOut.of(rows["request"]))
    for event_type in events.DECLARED.values():
        event = await database_sync_to_async(sample)(event_type, team, rows)
        if event_type.on_connect_only:
            with pytest.raises(events.UndeclaredEvent, match="sent on connect only"):
                await sync_to_async(events.publish)(event, team_id=team.id)
            continue
        await sync_to_async(events.publish)(event, team_id=team.id)
        for communicator, audience in (
            (team_socket, Audience.TEAM),
            (inbox_socket, Audience.INBOX),
        ):
            if event_type.audience & audience:
                received = await communicator.receive_json_from(timeout=5)
                # A team event that has a row behind it is numbered in the team's sequence.
                numbered = bool(event_type.audience & Audience.TEAM) and not event.transient
                assert ("seq" in received) == numbered, event_type.name
                received.pop("seq", None)
                assert received == event.wire(), event_type.name
        # Not sent where its audience is not: a marker sent to both after it is the
        # next thing each socket has (the layer keeps a channel's messages in order).
        await sync_to_async(events.publish)(marker, team_id=team.id)
        for communicator in (team_socket, inbox_socket):
            received = await communicator.receive_json_from(timeout=5)
            assert received["event"] == "pm_request.opened", event_type.name

    # Both sockets are still open and listening.
    await sync_to_async(events.publish)(
        events.PMRequestOpened(request=PMRequestOut.of(rows["request"])), team_id=team.id
    )
    assert (await team_socket.receive_json_from(timeout=5))["event"] == "pm_request.opened"
    assert (await inbox_socket.receive_json_from(timeout=5))["event"] == "pm_request.opened"
    await team_socket.disconnect()
    await inbox_socket.disconnect()


async def test_inbox_events_of_another_team_are_not_sent():
    team, _pm, rows = await database_sync_to_async(make_world)()
    stranger = await database_sync_to_async(make_user)("bob")  # staff, manages no team
    inbox = socket(stranger, "/ws/pm/")
    assert (await inbox.connect())[0]
    assert (await inbox.receive_json_from(timeout=5))["requests"] == []
    event = await database_sync_to_async(sample)(events.PMRequestOpened, team, rows)
    await sync_to_async(events.publish)(event, team_id=team.id)
    assert await inbox.receive_nothing(timeout=0.2)
    await inbox.disconnect()


def test_an_undeclared_event_is_refused_loudly():
    class Rogue(events.Event):  # not @declare'd
        name = "rogue.event"
        audience = Audience.TEAM

    with pytest.raises(events.UndeclaredEvent, match="rogue.event"):
        events.publish(Rogue(), team_id=1)
    with pytest.raises(events.UndeclaredEvent, match="no.such.event"):
        events.declared("no.such.event")


def test_every_team_event_has_a_handler_on_the_team_socket():
    from teams.web.consumers import PMInboxConsumer, TeamConsumer

    for event in events.for_audience(Audience.TEAM):
        assert callable(getattr(TeamConsumer, events.handler_name(event.name), None)), event.name
    for event in events.for_audience(Audience.INBOX):
        assert callable(getattr(PMInboxConsumer, events.handler_name(event.name), None))
    assert not hasattr(PMInboxConsumer, "query_answered")  # team-only events stay off it


async def test_knowledge_routing_with_a_live_team_socket_open(messages_api):
    messages_api(forward_chain_script())

    def setup():
        team = make_team("alpha")
        return team, make_user("alice", manages=[team])

    team, pm = await database_sync_to_async(setup)()
    live = socket(pm, "/ws/teams/alpha/")
    assert (await live.connect())[0]
    await receive_until(live, lambda e: e["event"] == "team.status")

    def run_conversation():
        team_actions.team_start(team=team)
        drain(team, limit=6)

    await database_sync_to_async(run_conversation)()
    seen = await receive_until(
        live, lambda e: e["event"] == "turn.finished" and e["turn"]["number"] == 6, limit=200
    )
    query_events = [e for e in seen if e["event"].startswith("query.")]
    assert [e["event"] for e in query_events] == [
        "query.asked",
        "query.forwarded",
        "query.answered",
    ]
    answered = query_events[-1]["query"]
    assert answered["status"] == "answered" and answered["answered_by"] == "reviewer"
    assert answered["lines"] == [
        "researcher asked coder",
        "coder forwarded to reviewer: Tokens are made in auth.py.",
        "reviewer answered",
    ]
    # Still open: a later event arrives.
    await database_sync_to_async(team_actions.team_pause)(team=team)
    status = await receive_until(live, lambda e: e["event"] == "team.status")
    assert status[-1]["status"] == "paused"
    await live.disconnect()


def test_an_event_published_in_a_savepoint_that_rolls_back_is_not_sent(settings):
    from contextlib import suppress

    from asgiref.sync import async_to_sync
    from channels.layers import channel_layers, get_channel_layer
    from django.db import transaction

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.pop("default", None)
    try:
        layer = get_channel_layer()
        team = make_team("alpha")
        channel = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)(events.team_group(team.id), channel)
        with transaction.atomic():
            events.publish(events.AgentNudged(agent="coder", by="kept"), team_id=team.id)
            with suppress(RuntimeError), transaction.atomic():
                events.publish(events.AgentNudged(agent="coder", by="undone"), team_id=team.id)
                raise RuntimeError("the savepoint rolls back")
        # Sent at once (no transaction): the next message on the channel after "kept".
        events.publish(events.AgentNudged(agent="coder", by="after"), team_id=team.id)
        got = [async_to_sync(layer.receive)(channel)["by"] for _ in range(2)]
    finally:
        channel_layers.backends.pop("default", None)
    assert got == ["kept", "after"]
