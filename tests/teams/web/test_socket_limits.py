"""The live sockets' limits: a client that sends is closed at its first frame, a user
holds at most MAX_SOCKETS_PER_USER sockets, and catch-up on connect is bounded."""

import asyncio
import os
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from teams import services
from teams.models import Message
from teams.web import consumers
from teams.web.consumers import (
    CATCH_UP_MAX_CHARS,
    CATCH_UP_MAX_MESSAGES,
    CLOSE_CLIENT_SENT,
    CLOSE_TOO_MANY_SOCKETS,
    MAX_SOCKETS_PER_USER,
)
from teams.web.slots import LocalSocketSlots, RedisSocketSlots
from tests.helpers import make_team, make_user, receive_until, socket

pytestmark = pytest.mark.django_db(transaction=True)

FLOOD = 5_000


async def settle(communicator, path):
    """Read the connect events up to the last, the hello: the team's status on a team
    socket, the open requests on the inbox. (Waiting for the socket to fall quiet lost
    the race to a hello later than the wait on a loaded machine.)"""
    hello = "team.status" if path.startswith("/ws/teams/") else "pm_request.open_list"
    await receive_until(communicator, lambda event: event["event"] == hello)


@pytest.mark.parametrize(
    "path, frame",
    [
        ("/ws/teams/alpha/", {"text_data": "{not json"}),
        ("/ws/teams/alpha/", {"bytes_data": b"\x00\xff"}),
        ("/ws/teams/alpha/", {"text_data": '{"event": "team.status", "status": "done"}'}),
        ("/ws/pm/", {"text_data": "x"}),
    ],
)
async def test_a_client_that_sends_is_closed_at_its_first_frame(path, frame):
    """The sockets only speak: the first frame closes the socket with 4400."""

    def setup():
        team = make_team()
        return make_user("hank", manages=[team])

    user = await database_sync_to_async(setup)()
    communicator = socket(user, path)
    assert (await communicator.connect())[0]
    await settle(communicator, path)
    await communicator.send_to(**frame)
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": CLOSE_CLIENT_SENT,
    }
    await communicator.wait(timeout=5)  # the consumer has ended
    assert communicator.future.exception() is None


@pytest.mark.parametrize("path", ["/ws/teams/alpha/", "/ws/pm/"])
async def test_a_flooding_socket_is_closed_and_others_are_still_served(path):
    """A client floods its socket (on /ws/pm/ as a staff user with no team at all):
    the server reads its first frame, closes it and reads nothing more, and another
    user's socket on the team still gets what is published."""

    def setup():
        team = make_team()
        flooder = make_user("flood") if path == "/ws/pm/" else make_user("flood", manages=[team])
        return team, flooder, make_user("calm", manages=[team])

    team, flooder, calm = await database_sync_to_async(setup)()
    listener = socket(calm, "/ws/teams/alpha/")
    assert (await listener.connect())[0]
    await settle(listener, "/ws/teams/alpha/")
    flood = socket(flooder, path)
    assert (await flood.connect())[0]
    await settle(flood, path)

    for number in range(FLOOD):
        await flood.send_to(text_data=f"frame {number}")
    assert await flood.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": CLOSE_CLIENT_SENT,
    }
    await flood.wait(timeout=5)
    # Everything after the first frame is still queued, unread.
    assert flood.input_queue.qsize() == FLOOD - 1

    coach = await database_sync_to_async(team.agents.get)(name="coach")
    await database_sync_to_async(services.message_add)(
        team=team, content="Still here.", author=coach
    )
    event = await listener.receive_json_from(timeout=5)
    assert event["event"] == "message.created" and event["message"]["content"] == "Still here."
    await listener.disconnect()


async def test_a_user_holds_at_most_the_cap_of_sockets():
    def setup():
        team = make_team()
        return make_user("many", manages=[team]), make_user("other", manages=[team])

    many, other = await database_sync_to_async(setup)()
    held = []
    for number in range(MAX_SOCKETS_PER_USER):  # both routes count
        communicator = socket(many, "/ws/pm/" if number % 2 else "/ws/teams/alpha/")
        assert (await communicator.connect())[0], number
        held.append(communicator)

    over = socket(many, "/ws/teams/alpha/")
    assert (await over.connect())[0]  # accepted, so the browser sees the close code
    assert await over.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": CLOSE_TOO_MANY_SOCKETS,
    }
    await over.disconnect()
    over_inbox = socket(many, "/ws/pm/")
    assert (await over_inbox.connect())[0]
    closed = await over_inbox.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": CLOSE_TOO_MANY_SOCKETS}
    await over_inbox.disconnect()

    someone_else = socket(other, "/ws/teams/alpha/")
    assert (await someone_else.connect())[0]
    seen = await receive_until(someone_else, lambda e: e["event"] == "team.status")
    assert seen[-1]["status"] == "idle"
    await someone_else.disconnect()

    # A socket that ends gives its slot back.
    await held.pop().disconnect()
    again = socket(many, "/ws/teams/alpha/")
    assert (await again.connect())[0]
    seen = await receive_until(again, lambda e: e["event"] == "team.status")
    assert seen[-1]["event"] == "team.status"
    for communicator in [*held, again]:
        await communicator.disconnect()
    slots = consumers.socket_slots(get_channel_layer())
    assert many.pk not in slots.leases


async def test_catch_up_on_connect_is_bounded_and_says_what_it_left_out():
    """300 missed messages of 2 KB: the newest that fit are sent, and the count of
    the rest."""

    def setup():
        team = make_team()
        coach = team.agents.get(name="coach")
        Message.objects.bulk_create(
            Message(team=team, author=coach, phase=team.phase, content=f"{n:04} " + "x" * 2043)
            for n in range(300)
        )
        return make_user("late", manages=[team])

    user = await database_sync_to_async(setup)()
    communicator = socket(user, "/ws/teams/alpha/?after=0")
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status", limit=400)
    sent = [e["message"] for e in seen if e["event"] == "message.created"]
    assert 0 < len(sent) <= CATCH_UP_MAX_MESSAGES
    assert sum(len(m["content"]) for m in sent) <= CATCH_UP_MAX_CHARS
    assert len(sent) == CATCH_UP_MAX_CHARS // 2048  # as many as fit
    assert sent[-1]["content"].startswith("0299 ")  # the newest kept, oldest first
    assert [m["id"] for m in sent] == sorted(m["id"] for m in sent)
    assert seen[-1]["catch_up_omitted"] == 300 - len(sent)
    await communicator.disconnect()

    # Caught up: nothing left out.
    communicator = socket(user, f"/ws/teams/alpha/?after={sent[-1]['id']}")
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status")
    assert seen == [seen[-1]] and seen[-1]["catch_up_omitted"] == 0
    await communicator.disconnect()


async def test_catch_up_count_bound_holds_for_small_messages():
    def setup():
        team = make_team()
        coach = team.agents.get(name="coach")
        Message.objects.bulk_create(
            Message(team=team, author=coach, phase=team.phase, content=f"short {n}")
            for n in range(CATCH_UP_MAX_MESSAGES + 5)
        )
        return make_user("small", manages=[team])

    user = await database_sync_to_async(setup)()
    communicator = socket(user, "/ws/teams/alpha/")
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status", limit=300)
    sent = [e["message"]["content"] for e in seen if e["event"] == "message.created"]
    assert len(sent) == CATCH_UP_MAX_MESSAGES and sent[-1] == f"short {CATCH_UP_MAX_MESSAGES + 4}"
    assert seen[-1]["catch_up_omitted"] == 5
    await communicator.disconnect()


# --- the slot keepers --------------------------------------------------------------


async def test_local_slots_free_an_expired_lease(monkeypatch):
    monkeypatch.setattr("teams.web.slots.SOCKET_LEASE_SECONDS", 0.1)
    slots = LocalSocketSlots()
    assert await slots.take(1, "a", 1)
    assert not await slots.take(1, "b", 1)
    await asyncio.sleep(0.2)
    assert await slots.take(1, "b", 1)  # a's lease ran out (a dead socket's slot)


REDIS_URL = os.environ.get("LOOM_TEST_REDIS_URL")


@pytest.mark.skipif(not REDIS_URL, reason="needs Redis (LOOM_TEST_REDIS_URL)")
async def test_redis_slots_hold_the_cap_across_processes(monkeypatch):
    """Two layers (two processes) share one count in Redis; a dead process's
    slots free themselves when their leases run out."""
    from channels_redis.core import RedisChannelLayer

    prefix = f"loom-test-{uuid.uuid4().hex}"
    one, two = (RedisChannelLayer(hosts=[REDIS_URL], prefix=prefix) for _ in range(2))
    first, second = consumers.socket_slots(one), consumers.socket_slots(two)
    assert isinstance(first, RedisSocketSlots)
    try:
        assert await first.take(7, "a", 2)
        assert await second.take(7, "b", 2)
        assert not await first.take(7, "c", 2)
        assert await first.take(8, "c", 2)  # another user
        await second.release(7, "b")
        assert await first.take(7, "c", 2)
        await first.renew(7, "c")
        monkeypatch.setattr("teams.web.slots.SOCKET_LEASE_SECONDS", 0.2)
        await first.renew(7, "a")
        await first.renew(7, "c")
        await asyncio.sleep(0.3)
        assert await second.take(7, "d", 2)
        assert await second.take(7, "e", 2)
    finally:
        await one.flush()
        await one.close_pools()
        await two.close_pools()
