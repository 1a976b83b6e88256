"""Channels: the team WebSocket and the turn worker, on the in-memory layer."""

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import ApplicationCommunicator, WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.db import connection

from teams import services
from teams.conversation import pm_requests, questions
from teams.engine.worker import TurnWorkerConsumer
from teams.models import Message, Team, Turn
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, make_team, make_user, receive_until, refused_with, socket

pytestmark = pytest.mark.django_db(transaction=True)


def two_agent_team():
    return make_team(
        "alpha",
        name="",
        goal="Ship it.",
        agents=[{"name": "coach", "role": "coach"}, {"name": "researcher", "role": "researcher"}],
    )


def connect(user, slug="alpha"):
    return socket(user, f"/ws/teams/{slug}/")


async def test_client_sees_messages_and_passes_of_a_running_team(messages_api):
    messages_api([text("Hello @researcher."), tool("pass_turn", {"reason": "agree"})])
    team = await database_sync_to_async(two_agent_team)()
    user = await database_sync_to_async(make_user)("boss", superuser=True)
    communicator = connect(user)
    connected, _ = await communicator.connect()
    assert connected
    hello = await communicator.receive_json_from()
    assert hello["event"] == "team.status"
    assert (hello["status"], hello["phase"], hello["turn_count"]) == ("idle", "refinement", 0)
    assert hello["status_label"] == "Idle" and hello["spent_usd"] == "0.0000"

    def run_two_turns():
        try:
            team_actions.team_start(team=team)
            drain(team, limit=2)
        finally:
            connection.close()

    # In a thread of its own, as a worker's turns are: on the one thread that
    # database_sync_to_async shares, the socket could not read its access meanwhile.
    await asyncio.to_thread(run_two_turns)
    # Until the pass note and the streamed text: under load the socket's catch-up from
    # the database can send the turns' messages before the live delta it is behind.
    wanted = {"pass_note", "text.delta"}

    def last_wanted(event) -> bool:
        kind = event["message"]["kind"] if event["event"] == "message.created" else None
        wanted.discard(kind)
        wanted.discard(event["event"])
        return not wanted

    seen = await receive_until(communicator, last_wanted)
    kinds = [e["event"] for e in seen]
    assert "turn.started" in kinds and "text.delta" in kinds and "turn.finished" in kinds
    chat = [e["message"] for e in seen if e["event"] == "message.created"]
    assert chat[0]["speaker"] == "coach" and chat[0]["content"] == "Hello @researcher."
    assert chat[-1]["content"] == "(researcher passes: agree)"
    deltas = "".join(e["text"] for e in seen if e["event"] == "text.delta")
    assert deltas == "Hello @researcher."
    await communicator.disconnect()


async def test_anonymous_client_is_refused():
    await database_sync_to_async(two_agent_team)()
    assert await refused_with(connect(AnonymousUser())) == 4403


async def test_manager_of_another_team_is_refused():
    def setup():
        two_agent_team()
        other = services.team_create(slug="beta")
        user = make_user("bob")
        other.managers.add(user)
        return user

    user = await database_sync_to_async(setup)()
    assert await refused_with(connect(user, "alpha")) == 4403
    communicator = connect(user, "beta")
    connected, _ = await communicator.connect()
    assert connected
    await communicator.disconnect()


async def test_full_asgi_stack_refuses_anonymous_websocket():
    from loomsite.asgi import application

    await database_sync_to_async(two_agent_team)()
    communicator = WebsocketCommunicator(
        application,
        "/ws/teams/alpha/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")],
    )
    assert await refused_with(communicator) == 4403


async def test_worker_runs_a_woken_turn_once_despite_duplicate_wake_ups(messages_api):
    api = messages_api([text("Only once.")])

    def start():
        team = two_agent_team()
        Team.objects.filter(pk=team.pk).update(max_turns=1)
        team.refresh_from_db()
        team_actions.team_start(team=team)
        return Turn.objects.get(status="queued").id

    turn_id = await database_sync_to_async(start)()
    worker = ApplicationCommunicator(
        TurnWorkerConsumer.as_asgi(), {"type": "channel", "channel": "loom.turns"}
    )
    await worker.send_input({"type": "turn.queued", "turn_id": turn_id})
    await worker.send_input({"type": "turn.queued", "turn_id": turn_id})
    for _ in range(100):
        status = await database_sync_to_async(lambda: Turn.objects.get(pk=turn_id).status)()
        if status == "done":
            break
        await asyncio.sleep(0.05)
    assert status == "done"
    await asyncio.sleep(0.2)
    assert await database_sync_to_async(Message.objects.filter(kind="chat").count)() == 1
    assert len(api.requests) == 1
    worker.stop()


async def test_pm_inbox_streams_only_the_users_teams():
    def setup():
        mine = two_agent_team()
        theirs = services.team_create(slug="beta", agents=[{"name": "coach", "role": "coach"}])
        user = make_user("carol")
        mine.managers.add(user)
        return mine, theirs, user

    mine, theirs, user = await database_sync_to_async(setup)()
    anonymous = socket(AnonymousUser(), "/ws/pm/")
    assert await refused_with(anonymous) == 4403

    communicator = socket(user, "/ws/pm/")
    assert (await communicator.connect())[0]
    hello = await communicator.receive_json_from(timeout=5)
    assert hello == {"event": "pm_request.open_list", "requests": []}

    def ask(team, question):
        team_actions.team_start(team=team)
        return pm_requests.pm_request_open(
            team=team, agent=team.agents.get(name="coach"), question=question, turn=None
        )

    async def until(name):
        """Events up to the next `name`: every team.progress on the way is carol's team."""
        while True:
            event = await communicator.receive_json_from(timeout=5)
            if event["event"] == name:
                return event
            assert event["event"] == "team.progress" and event["team"] == mine.slug, event

    await database_sync_to_async(ask)(theirs, "Not for carol?")
    request = await database_sync_to_async(ask)(mine, "For carol?")
    event = await until("pm_request.opened")
    assert event["request"]["question"] == "For carol?"
    await database_sync_to_async(pm_requests.pm_request_answer)(
        request_id=request.id, answer="Yes."
    )
    event = await until("pm_request.answered")
    assert event["request"]["id"] == request.id
    # The team list hears that carol's team runs again, and nothing of beta.
    progress = await communicator.receive_json_from(timeout=5)
    assert progress["event"] == "team.progress" and progress["team"] == mine.slug
    assert progress["status"] == "running" and progress["max_turns"] == mine.max_turns
    # ...nor after: the next request of carol's team comes with nothing of beta before it.
    await database_sync_to_async(pm_requests.pm_request_open)(
        team=mine, agent=await mine.agents.aget(name="coach"), question="Last?", turn=None
    )
    assert (await until("pm_request.opened"))["request"]["question"] == "Last?"
    await communicator.disconnect()


async def test_reconnecting_page_gets_what_it_missed_and_the_open_request():
    """A page rendered with messages up to id N connects with ?after=N and receives
    the later ones, then the status with the PM request open now."""

    def setup():
        team = two_agent_team()
        coach = team.agents.get(name="coach")
        first = services.message_add(team=team, content="Seen at render.", author=coach)
        services.message_add(team=team, content="Missed one.", author=coach)
        services.message_add(
            team=team,
            content="Private.",
            author=coach,
            recipient=team.agents.get(name="researcher"),
        )
        services.message_add(team=team, content="Missed two.", author=coach)
        team_actions.team_start(team=team)
        pm_requests.pm_request_open(team=team, agent=coach, question="Which?", turn=None)
        return first.id

    first_id = await database_sync_to_async(setup)()
    user = await database_sync_to_async(make_user)("dora", superuser=True)
    communicator = socket(user, f"/ws/teams/alpha/?after={first_id}")
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status")
    missed = [e["message"]["content"] for e in seen if e["event"] == "message.created"]
    assert missed[:2] == ["Missed one.", "Missed two."]
    assert "Seen at render." not in missed and "Private." not in missed
    assert seen[-1]["pm_request"]["question"] == "Which?"
    await communicator.disconnect()

    # A garbage `after` is treated as "from the start", never as an error.
    communicator = socket(user, "/ws/teams/alpha/?after=x")
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status")
    assert [e["message"]["content"] for e in seen if e["event"] == "message.created"][0] == (
        "Seen at render."
    )
    await communicator.disconnect()


async def test_pm_inbox_connect_lists_the_requests_open_now():
    def setup():
        team = two_agent_team()
        user = make_user("erin")
        team.managers.add(user)
        team_actions.team_start(team=team)
        pm_requests.pm_request_open(
            team=team, agent=team.agents.get(name="coach"), question="Before you came?", turn=None
        )
        return user

    user = await database_sync_to_async(setup)()
    communicator = socket(user, "/ws/pm/")
    assert (await communicator.connect())[0]
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["event"] == "pm_request.open_list"
    assert [r["question"] for r in hello["requests"]] == ["Before you came?"]
    await communicator.disconnect()


async def test_team_socket_closes_once_the_user_no_longer_manages_the_team(monkeypatch):
    monkeypatch.setattr("teams.web.consumers.ACCESS_RECHECK_SECONDS", 0)

    def setup():
        team = two_agent_team()
        user = make_user("fred")
        team.managers.add(user)
        return team, user

    team, user = await database_sync_to_async(setup)()
    communicator = connect(user)
    assert (await communicator.connect())[0]
    await receive_until(communicator, lambda e: e["event"] == "team.status")
    coach = await database_sync_to_async(team.agents.get)(name="coach")
    await database_sync_to_async(services.message_add)(
        team=team, content="Still yours.", author=coach
    )
    event = await communicator.receive_json_from(timeout=5)
    assert event["message"]["content"] == "Still yours."

    await database_sync_to_async(team.managers.remove)(user)
    await database_sync_to_async(services.message_add)(
        team=team, content="Not for fred.", author=coach
    )
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await communicator.disconnect()


@pytest.mark.parametrize("change", [{"is_active": False}, {"is_staff": False}])
async def test_team_socket_closes_for_a_deactivated_or_demoted_user(monkeypatch, change):
    monkeypatch.setattr("teams.web.consumers.ACCESS_RECHECK_SECONDS", 0)

    def setup():
        team = two_agent_team()
        return team, make_user("ivy", manages=[team])

    team, user = await database_sync_to_async(setup)()
    communicator = connect(user)
    assert (await communicator.connect())[0]
    await receive_until(communicator, lambda e: e["event"] == "team.status")

    def change_and_speak():
        type(user).objects.filter(pk=user.pk).update(**change)
        services.message_add(
            team=team, content="Not for ivy.", author=team.agents.get(name="coach")
        )

    await database_sync_to_async(change_and_speak)()
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await communicator.disconnect()


async def test_pm_inbox_socket_closes_for_a_deactivated_user(monkeypatch):
    monkeypatch.setattr("teams.web.consumers.ACCESS_RECHECK_SECONDS", 0)

    def setup():
        team = two_agent_team()
        user = make_user("gina")
        team.managers.add(user)
        team_actions.team_start(team=team)
        return team, user

    team, user = await database_sync_to_async(setup)()
    communicator = socket(user, "/ws/pm/")
    assert (await communicator.connect())[0]
    assert (await communicator.receive_json_from(timeout=5))["requests"] == []

    def deactivate_and_ask():
        type(user).objects.filter(pk=user.pk).update(is_active=False)
        pm_requests.pm_request_open(
            team=team, agent=team.agents.get(name="coach"), question="Secret?", turn=None
        )

    await database_sync_to_async(deactivate_and_ask)()
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await communicator.disconnect()


async def test_sockets_close_when_a_client_sends():
    """The sockets only speak: the first frame a client sends, garbage or not,
    closes the socket with 4400 (tests/teams/test_socket_limits.py floods one)."""
    await database_sync_to_async(two_agent_team)()
    user = await database_sync_to_async(make_user)("hank", superuser=True)
    for path in ("/ws/teams/alpha/", "/ws/pm/"):
        communicator = socket(user, path)
        assert (await communicator.connect())[0]
        while not await communicator.receive_nothing(timeout=0.2):
            await communicator.receive_json_from()  # the connect events
        await communicator.send_to(text_data="{not json")
        await communicator.send_to(bytes_data=b"\x00\xff")
        closed = await communicator.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4400}
        await communicator.wait(timeout=5)
        assert communicator.future.exception() is None
    # The server goes on serving others.
    communicator = connect(user)
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status")
    assert seen[-1]["status"] == "idle"
    await communicator.disconnect()


async def test_turn_finished_reports_what_the_turn_cost(messages_api):
    messages_api([text("Hi.", input_tokens=1_000_000, output_tokens=0)])  # $3 at Sonnet prices
    team = await database_sync_to_async(two_agent_team)()
    user = await database_sync_to_async(make_user)("boss", superuser=True)
    communicator = connect(user)
    assert (await communicator.connect())[0]

    def one_turn():
        team_actions.team_start(team=team)
        drain(team, limit=1)

    await database_sync_to_async(one_turn)()
    seen = await receive_until(communicator, lambda e: e["event"] == "turn.finished")
    assert seen[-1]["turn"]["cost_usd"] == "3.000000"
    assert seen[-1]["team"]["spent_usd"] == "3.0000"
    await communicator.disconnect()


async def test_connect_replays_the_latest_questions_as_they_stand():
    """A page rendered before a query was asked or answered sees it on connect."""

    def setup():
        team = two_agent_team()
        coach, researcher = team.agents.get(name="coach"), team.agents.get(name="researcher")
        answered = questions.ask(team=team, origin=coach, question="Why?", target="researcher")
        questions.answer(team=team, key=answered.key, answerer=researcher, text="Because.")
        open_one = questions.ask(team=team, origin=researcher, question="When?", target="coach")
        return team, answered.key, open_one.key

    team, answered, open_one = await database_sync_to_async(setup)()
    user = await database_sync_to_async(make_user)("jay", superuser=True)
    communicator = connect(user)
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status")
    replayed = [(e["event"], e["query"]["key"]) for e in seen if e["event"].startswith("query.")]
    assert replayed == [("query.answered", answered), ("query.asked", open_one)]
    await communicator.disconnect()


@pytest.mark.parametrize("after", ["%C2%B2", "9" * 5000, "-1", "1e5"])
async def test_a_garbage_after_is_read_as_zero_not_a_crash(after):
    await database_sync_to_async(two_agent_team)()
    user = await database_sync_to_async(make_user)("kim", superuser=True)
    communicator = socket(user, f"/ws/teams/alpha/?after={after}")
    assert (await communicator.connect())[0]
    seen = await receive_until(communicator, lambda e: e["event"] == "team.status")
    assert seen[-1]["catch_up_omitted"] == 0
    await communicator.disconnect()


def token_socket(key: str, slug="alpha", origin: bytes | None = None):
    """A program's handshake through the whole ASGI stack: a Bearer token, no cookie."""
    from loomsite.asgi import application

    headers = [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {key}".encode())]
    if origin is not None:
        headers.append((b"origin", origin))
    return WebsocketCommunicator(application, f"/ws/teams/{slug}/", headers=headers)


async def test_a_program_listens_with_its_token_until_it_is_revoked(monkeypatch):
    monkeypatch.setattr("teams.web.consumers.ACCESS_RECHECK_SECONDS", 0)

    def setup():
        team = two_agent_team()
        beta = services.team_create(slug="beta")
        token, key = services.api_token_create(team=team, label="listener")
        return team, beta, token, key

    team, beta, token, key = await database_sync_to_async(setup)()
    communicator = token_socket(key)
    assert (await communicator.connect())[0]
    await receive_until(communicator, lambda e: e["event"] == "team.status")
    coach = await database_sync_to_async(team.agents.get)(name="coach")
    await database_sync_to_async(services.message_add)(team=team, content="Hi.", author=coach)
    seen = await receive_until(communicator, lambda e: e["event"] == "message.created")
    assert seen[-1]["message"]["content"] == "Hi."

    await database_sync_to_async(services.api_token_revoke)(token=token)
    await database_sync_to_async(services.message_add)(team=team, content="Gone.", author=coach)
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await communicator.disconnect()

    # A revoked or unknown token, or another team's slug, is refused.
    for refused in (token_socket(key), token_socket("loom_nope"), token_socket(key, "beta")):
        assert await refused_with(refused) == 4403


async def test_an_expired_token_is_refused_and_a_socket_stops_when_its_token_expires():
    """Issue 22: a token past its expiry opens no socket (4403, as a revoked one), and a
    socket open when its token expires is closed at the next event, without waiting
    for the periodic access recheck (ACCESS_RECHECK_SECONDS is left as it is)."""
    from datetime import timedelta

    from django.utils import timezone

    from loomsite.asgi import application
    from teams.models import ApiToken

    def setup():
        team = two_agent_team()
        superuser = make_user("root", superuser=True)
        soon, soon_key = services.api_token_create(team=team, expires_in="1h")
        ApiToken.objects.filter(pk=soon.pk).update(
            expires_at=timezone.now() + timedelta(seconds=1.5)
        )
        expired = [
            services.api_token_create(team=team, expires_in="1h"),
            services.api_token_create(user=superuser, expires_in="90d"),
        ]
        ApiToken.objects.filter(pk__in=[t.pk for t, _ in expired]).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
        return team, soon_key, [key for _, key in expired]

    team, soon_key, expired_keys = await database_sync_to_async(setup)()
    for key in expired_keys:
        assert await refused_with(token_socket(key)) == 4403
        inbox = WebsocketCommunicator(
            application,
            "/ws/pm/",
            headers=[(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {key}".encode())],
        )
        assert await refused_with(inbox) == 4403

    communicator = token_socket(soon_key)
    assert (await communicator.connect())[0]
    await receive_until(communicator, lambda e: e["event"] == "team.status")
    await asyncio.sleep(1.6)
    coach = await database_sync_to_async(team.agents.get)(name="coach")
    await database_sync_to_async(services.message_add)(team=team, content="Late.", author=coach)
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await communicator.disconnect()


async def test_a_token_does_not_let_another_site_in(monkeypatch):
    """Browsers always send an Origin: a token handshake with a foreign one is refused
    before the consumer, as a page's would be."""

    def setup():
        two_agent_team()
        return services.api_token_create(team=Team.objects.get(slug="alpha"))[1]

    key = await database_sync_to_async(setup)()
    foreign = token_socket(key, origin=b"http://evil.example")
    connected, _ = await foreign.connect()
    assert not connected
    own = token_socket(key, origin=b"http://127.0.0.1")
    assert (await own.connect())[0]
    await own.disconnect()
