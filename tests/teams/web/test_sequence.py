"""No live event lost: every team event is numbered in the team's sequence and kept, so
a socket that misses one (here: a channel layer that drops chosen group sends between
the commit and the socket) is sent it from the database, in order and once, without
reconnecting; a client that reconnects with `after_seq` gets exactly what it missed."""

import time

import pytest
from channels.db import database_sync_to_async
from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers, get_channel_layer
from django.db import connection

from loomsite.env import parse_redis_url
from teams import services
from teams.live import event_log
from teams.models import LiveEvent, Team
from teams.web import consumers
from tests.helpers import make_team, make_user, socket, worker_redis_url

pytestmark = pytest.mark.django_db(transaction=True)


class FaultyLayer:
    """The configured channel layer, except that the group sends `drop` picks never
    leave this process and those `twice` picks are sent twice (a fault between the
    commit and the socket, not a fake of the layer: the rest goes through it)."""

    def __init__(self, inner, drop=lambda message: False, twice=lambda message: False):
        self.inner, self.drop, self.twice = inner, drop, twice
        self.dropped: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def group_send(self, group, message):
        if self.drop(message):
            self.dropped.append(message)
            return
        await self.inner.group_send(group, message)
        if self.twice(message):
            await self.inner.group_send(group, message)


@pytest.fixture
def faulty_layer(monkeypatch, settings):
    """On PostgreSQL with LOOM_TEST_REDIS_URL, the faults sit on the Redis layer."""
    redis_url = worker_redis_url()
    if redis_url and connection.vendor == "postgresql":
        settings.CHANNEL_LAYERS = {"default": parse_redis_url(redis_url, "LOOM_TEST_REDIS_URL")}

    def install(**faults):
        layer = FaultyLayer(get_channel_layer(), **faults)
        monkeypatch.setitem(channel_layers.backends, DEFAULT_CHANNEL_LAYER, layer)
        return layer

    return install


def content_of(message: dict) -> str:
    return message.get("message", {}).get("content", "")


def setup():
    team = make_team()
    return team, make_user("pm", manages=[team])


def say(team: Team, *lines: str):
    for line in lines:
        services.message_add(team=team, content=line, author_label="pm", kind="pm")


async def read_for(communicator, seconds: float) -> list[dict]:
    """Everything the socket sends within `seconds`."""
    seen, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not await communicator.receive_nothing(timeout=0.05):
            seen.append(await communicator.receive_json_from(timeout=5))
    return seen


async def test_a_connected_socket_fills_a_gap_from_the_database_in_order_and_once(
    faulty_layer,
):
    layer = faulty_layer(
        drop=lambda m: content_of(m) in ("two", "three"), twice=lambda m: content_of(m) == "four"
    )
    team, pm = await database_sync_to_async(setup)()
    communicator = socket(pm, "/ws/teams/alpha/")
    assert (await communicator.connect())[0]
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["event"] == "team.status" and hello["head"] == 0

    await database_sync_to_async(say)(team, "one", "two", "three", "four", "five")
    seen = await read_for(communicator, 2.5)
    said = [e for e in seen if e["event"] == "message.created"]
    assert [content_of(e) for e in said] == ["one", "two", "three", "four", "five"]
    assert [e["seq"] for e in said] == [1, 2, 3, 4, 5]
    # The two the layer dropped came from the database, marked as such; no duplicate.
    assert [content_of(e) for e in said if e.get("catch_up")] == ["two", "three"]
    assert len(layer.dropped) == 2
    await communicator.disconnect()


async def test_events_lost_at_the_end_of_a_burst_arrive_without_a_later_event(faulty_layer):
    faulty_layer(drop=lambda m: content_of(m) in ("last", "very last"))
    team, pm = await database_sync_to_async(setup)()
    communicator = socket(pm, "/ws/teams/alpha/")
    assert (await communicator.connect())[0]
    await communicator.receive_json_from(timeout=5)

    await database_sync_to_async(say)(team, "first", "last", "very last")
    started, seen = time.monotonic(), []
    while not seen or content_of(seen[-1]) != "very last":
        assert time.monotonic() - started < consumers.HEAD_CHECK_FIRST_SECONDS + 3, seen
        if not await communicator.receive_nothing(timeout=0.05):
            seen.append(await communicator.receive_json_from(timeout=5))
    said = [(content_of(e), e.get("seq"), bool(e.get("catch_up"))) for e in seen]
    assert said == [("first", 1, False), ("last", 2, True), ("very last", 3, True)]
    assert await communicator.receive_nothing(timeout=1.5)  # nothing twice
    await communicator.disconnect()


async def test_every_team_event_is_numbered_statuses_and_requests_too(faulty_layer):
    """Not only messages: a dropped status change or PM request is caught up too."""
    faulty_layer(drop=lambda m: m["type"] in ("team.status", "pm_request.opened"))
    team, pm = await database_sync_to_async(setup)()
    communicator = socket(pm, "/ws/teams/alpha/")
    assert (await communicator.connect())[0]
    await communicator.receive_json_from(timeout=5)

    def act():
        from teams.conversation import pm_requests
        from teams.run import team_actions

        team_actions.team_start(team=team)
        pm_requests.pm_request_open(team=team, question="Which parser?")
        say(team, "after")

    await database_sync_to_async(act)()
    seen = await read_for(communicator, 2.5)
    numbered = [e for e in seen if "seq" in e]
    assert [e["seq"] for e in numbered] == list(range(1, len(numbered) + 1))
    names = [e["event"] for e in numbered]
    assert "team.status" in names and "pm_request.opened" in names
    caught = {e["event"] for e in numbered if e.get("catch_up")}
    assert caught == {"team.status", "pm_request.opened"}
    status = next(e for e in numbered if e["event"] == "team.status")
    assert status["status"] == "running"
    await communicator.disconnect()


async def test_reconnecting_with_after_seq_gets_exactly_what_was_missed():
    team, pm = await database_sync_to_async(setup)()
    await database_sync_to_async(say)(team, "seen", "missed one", "missed two")
    communicator = socket(pm, "/ws/teams/alpha/?after_seq=1")
    assert (await communicator.connect())[0]
    seen = await read_for(communicator, 0.5)
    assert [(e["event"], e.get("seq")) for e in seen] == [
        ("message.created", 2),
        ("message.created", 3),
        ("team.status", None),
    ]
    assert all(e["catch_up"] for e in seen[:2])
    assert seen[-1]["head"] == 3 and seen[-1]["catch_up_omitted"] == 0
    await communicator.disconnect()

    # Up to date: only the status.
    communicator = socket(pm, "/ws/teams/alpha/?after_seq=3")
    assert (await communicator.connect())[0]
    seen = await read_for(communicator, 0.5)
    assert [e["event"] for e in seen] == ["team.status"]
    await communicator.disconnect()


async def test_catch_up_by_sequence_keeps_its_bounds():
    """250 missed events: the newest CATCH_UP_MAX_MESSAGES, and the count of the rest."""

    def many():
        team, pm = setup()
        say(team, *(f"line {n}" for n in range(250)))
        return pm

    pm = await database_sync_to_async(many)()
    communicator = socket(pm, "/ws/teams/alpha/?after_seq=0")
    assert (await communicator.connect())[0]
    seen = await read_for(communicator, 1.5)
    said = [e for e in seen if e["event"] == "message.created"]
    assert len(said) == consumers.CATCH_UP_MAX_MESSAGES
    assert content_of(said[-1]) == "line 249" and said[0]["seq"] == 51
    assert seen[-1]["event"] == "team.status"
    assert seen[-1]["catch_up_omitted"] == 250 - consumers.CATCH_UP_MAX_MESSAGES
    await communicator.disconnect()


def test_the_sequence_survives_a_stale_save_and_old_events_are_pruned(monkeypatch):
    monkeypatch.setattr(event_log, "LIVE_EVENTS_KEPT", 10)
    monkeypatch.setattr(event_log, "PRUNE_EVERY", 5)
    team = make_team()
    stale = Team.objects.get(pk=team.pk)  # read before the events
    say(team, *(f"line {n}" for n in range(20)))
    stale.name = "Renamed"
    stale.save()  # must not set the sequence back to 0
    say(team, "one more")
    team.refresh_from_db()
    assert team.name == "Renamed" and team.event_seq == 21
    assert event_log.team_event_head(team_id=team.id) == 21
    kept = list(LiveEvent.objects.filter(team=team).values_list("seq", flat=True))
    assert kept == list(range(11, 22))  # the newest 10 at the last prune (20), then 21
    # Events no longer kept count as left out.
    sent, omitted = event_log.team_events_after(
        team_id=team.id,
        after_seq=5,
        upto_seq=21,
        viewer_agent_id=None,
        max_events=100,
        max_chars=10**6,
    )
    assert [e["seq"] for e in sent] == list(range(11, 22)) and omitted == 5


async def connect_while_a_message_lands(team, pm, monkeypatch):
    """A first connect whose catch-up reads the messages just after "between" was
    committed (after it read the team's head)."""
    from teams import selectors

    read_messages = selectors.team_messages_after_bounded

    def a_message_lands_between_the_reads(**kwargs):
        say(team, "between")
        return read_messages(**kwargs)

    monkeypatch.setattr(selectors, "team_messages_after_bounded", a_message_lands_between_the_reads)
    communicator = socket(pm, "/ws/teams/alpha/")
    assert (await communicator.connect())[0]
    return communicator


async def test_a_message_committed_during_the_connect_catch_up_is_sent_once(
    faulty_layer, monkeypatch
):
    """A first connect (no `after_seq`) catches up on the messages after an id, read
    after the team's head: a message committed between the two reads is in that
    catch-up, and its live event (numbered past the head) arrives too. The page gets it
    once (bench/load.py counted such duplicates under load)."""
    faulty_layer()
    team, pm = await database_sync_to_async(setup)()
    await database_sync_to_async(say)(team, "before")
    communicator = await connect_while_a_message_lands(team, pm, monkeypatch)
    seen = await read_for(communicator, 2.0)
    said = [content_of(e) for e in seen if e["event"] == "message.created"]
    assert said == ["before", "between"]
    # Later messages still come live, in order.
    await database_sync_to_async(say)(team, "after")
    seen = await read_for(communicator, 1.5)
    assert [(content_of(e), e["seq"]) for e in seen if e["event"] == "message.created"] == [
        ("after", 3)
    ]
    await communicator.disconnect()


async def test_a_message_sent_by_the_connect_catch_up_is_not_sent_again_by_a_gap_fill(
    faulty_layer, monkeypatch
):
    """The same message, its live event lost: the next event's gap fill reads it from
    the database, and the socket does not send it again."""
    faulty_layer(drop=lambda m: content_of(m) == "between")
    team, pm = await database_sync_to_async(setup)()
    communicator = await connect_while_a_message_lands(team, pm, monkeypatch)
    await database_sync_to_async(say)(team, "after")
    seen = await read_for(communicator, 2.0)
    said = [(content_of(e), e.get("seq")) for e in seen if e["event"] == "message.created"]
    assert said == [("between", None), ("after", 2)]
    await communicator.disconnect()


def test_events_numbered_together_take_consecutive_numbers_in_publishing_order(monkeypatch):
    """A turn's finish numbers its events in one statement (events.numbered_together):
    each team's in the order published, after what the team had, and pruned as one by
    one would be; nothing numbered when the transaction is rolled back."""
    from django.db import transaction

    from teams.live import events

    monkeypatch.setattr(event_log, "LIVE_EVENTS_KEPT", 4)
    monkeypatch.setattr(event_log, "PRUNE_EVERY", 5)
    team, other = make_team(), make_team(slug="beta")
    say(team, "before")  # seq 1
    with transaction.atomic(), events.numbered_together():
        say(team, "two", "three")
        say(other, "elsewhere")
        say(team, "four", "five", "six")
    names = [
        e["message"]["content"]
        for e in LiveEvent.objects.filter(team=team)
        .values_list("payload", flat=True)
        .order_by("seq")
    ]
    seqs = list(LiveEvent.objects.filter(team=team).values_list("seq", flat=True).order_by("seq"))
    assert seqs == [3, 4, 5, 6] and names == ["three", "four", "five", "six"]  # 1, 2 pruned at 5
    team.refresh_from_db()
    assert team.event_seq == 6 and event_log.team_event_head(team_id=other.id) == 1
    with transaction.atomic():
        with events.numbered_together():
            say(team, "rolled back")
            transaction.set_rollback(True)
    team.refresh_from_db()
    assert team.event_seq == 6
    say(team, "after")
    assert event_log.team_event_head(team_id=team.id) == 7
