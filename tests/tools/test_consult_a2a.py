"""Consultants that are A2A agents: ask_peer sends the request as a message through the
a2a-sdk client to the fake agents of tests/fakes/a2a_agents.py (the official SDK's
server, on a loopback port); a completed task's artifact and an input-required task's
question come back as the answer, stored as a consultation at $0; an agent that never
finishes, fails or cannot be reached is an "Error: ..."; a loopback URL is refused
unless the outbound guard allows it; the bearer token from the key variable reaches
the agent and nothing else (no row, no log line, no result)."""

import io
import logging

import pytest
from django.core.management import call_command

from teams.engine import a2a_consult
from teams.engine import consult as engine_consult
from teams.errors import InvalidInput, ModelError
from teams.integrations import consultations
from teams.models import ConsultantProfile, Consultation, Team, Turn
from teams.run import team_actions
from tests.fakes.a2a_agents import ANSWER, FAILURE, QUESTION, FakeA2AAgents
from tests.fakes.mcp_servers import free_port
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tools import registry

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "a2a-secret-7f3c9d"  # the bearer token, held only by the key variable


@pytest.fixture
def a2a_agents(loopback_allowed):
    with FakeA2AAgents() as agents:
        yield agents


@pytest.fixture(autouse=True)
def token(monkeypatch):
    monkeypatch.setenv("SCOUT_A2A_TOKEN", TOKEN)


def a2a_profile(url, name="scout", key_env="SCOUT_A2A_TOKEN"):
    """An A2A consultant, enabled for alpha (saved past the service: the guard's check
    at save time is tested on its own)."""
    profile = ConsultantProfile.objects.create(
        name=name, provider="a2a", model="a2a", a2a_url=url, key_env=key_env
    )
    Team.objects.get(slug="alpha").consultants.add(profile)
    return profile


def ask(ctx, peer="scout", **arguments):
    arguments.setdefault("prompt", "How should the word index be built?")
    return registry.execute("ask_peer", {"peer": peer, **arguments}, ctx)


def test_an_agent_asks_an_a2a_agent_through_the_loop_and_gets_its_answer(
    team, agents, messages_api, a2a_agents
):
    a2a_profile(a2a_agents.card_url("answer"))
    model = messages_api(
        per_agent(
            {
                "coach": [
                    tool("ask_peer", {"peer": "scout", "prompt": "Index?"}, "toolu_a2a"),
                    text("Noted."),
                ]
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    turn = Turn.objects.get(number=1)
    assert (turn.status, turn.outcome) == ("done", "message"), turn.error
    result = model.requests[1].body["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_a2a" and ANSWER in result["content"]
    record = Consultation.objects.get()
    assert result["content"].startswith(f"## scout (a2a), consultation {record.pk}\n\n{ANSWER}")
    assert "Confidence" not in result["content"]  # an A2A agent gives none
    assert (record.status, record.turn, record.cost_usd) == ("done", turn, 0)
    assert (record.input_tokens, record.output_tokens) == (0, 0)
    assert record.output["answer"] == ANSWER and record.output["responder"] == "scout"
    assert "Index?" in a2a_agents.asked["answer"][0]  # the request, framed, as the message
    assert "coach (coach) of team Alpha is asking" in a2a_agents.asked["answer"][0]
    whole = consultations.render_whole(consultations.consultation_of(team, record.pk))
    assert ANSWER in whole and "no token price, recorded as $0" in whole


def test_the_input_required_question_comes_back_as_the_answer(ctx_for, a2a_agents):
    a2a_profile(a2a_agents.url("ask"))  # the base URL: the card is at the well-known path
    result = ask(ctx_for("coder"))
    assert not result.is_error and QUESTION in result.text
    record = Consultation.objects.get()
    assert record.status == "done" and record.output["answer"] == QUESTION
    assert "asks this back" in record.output["execution_notes"]
    again = registry.execute("read_consultation", {"consultation_id": record.pk}, ctx_for("coder"))
    assert QUESTION in again.text


def test_an_agent_that_never_finishes_is_an_error_and_its_task_is_canceled(
    ctx_for, a2a_agents, monkeypatch
):
    monkeypatch.setattr(engine_consult, "A2A_TIMEOUT_SECONDS", 1.5)
    a2a_profile(a2a_agents.card_url("stall"))
    result = ask(ctx_for("coder"))
    record = Consultation.objects.get()
    assert f"consultation {record.pk}\nError: The A2A agent scout did not answer within 1.5 s" in (
        result.text
    )
    assert "was still working; it was canceled" in result.text
    assert len(a2a_agents.canceled) == 1 and record.status == "failed"


def test_a_failed_task_and_an_unreachable_agent_are_errors(ctx_for, a2a_agents):
    a2a_profile(a2a_agents.card_url("fail"))
    failed = ask(ctx_for("coder"))
    assert "Error: The A2A agent's task" in failed.text and f"ended failed: {FAILURE}" in (
        failed.text
    )
    a2a_profile(f"http://127.0.0.1:{free_port()}/nobody/", name="ghost")
    unreachable = ask(ctx_for("coder"), peer="ghost")
    assert "Error: Could not ask the A2A agent ghost:" in unreachable.text
    assert list(Consultation.objects.values_list("status", flat=True)) == ["failed", "failed"]


def test_ask_multi_shows_an_a2a_answer_beside_another(ctx_for, a2a_agents):
    a2a_profile(a2a_agents.card_url("answer"))
    a2a_profile(a2a_agents.card_url("ask"), name="asker")
    result = registry.execute(
        "ask_multi", {"prompt": "Index?", "peers": ["scout", "asker"]}, ctx_for("coder")
    )
    assert result.text.startswith("2 of 2 consultants answered.")
    assert ANSWER in result.text and QUESTION in result.text


def test_a_loopback_url_is_refused_unless_allowed(ctx_for, a2a_agents, settings):
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    url = a2a_agents.card_url("answer")
    with pytest.raises(InvalidInput, match="loopback") as refused:
        consultations.consultant_profile_save(
            profile=ConsultantProfile(name="scout", provider="a2a", model="a2a", a2a_url=url),
            fields=list(consultations.PROFILE_SETTINGS),
        )
    assert refused.value.field == "a2a_url"
    a2a_profile(url)  # stored before the guard, or by hand: refused when asked
    result = ask(ctx_for("coder"))
    said = "Error: Consultant scout is not asked: its agent card URL is refused: 127.0.0.1"
    assert said in result.text
    assert a2a_agents.seen == []  # nothing reached it
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = True  # allowed: asked
    assert ANSWER in ask(ctx_for("coder")).text


def test_every_connection_is_guarded_not_only_the_stored_url(a2a_agents, settings):
    # Past the check of the stored URL (a card may name its endpoint anywhere): the
    # connection itself checks the address it connects to, and refuses loopback.
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    with pytest.raises(ModelError, match="its A2A URL is refused: 127.0.0.1 is a loopback"):
        a2a_consult.ask(
            name="scout", url=a2a_agents.card_url("answer"), token=TOKEN, text="Hi", seconds=5
        )
    assert a2a_agents.seen == []


def test_the_token_reaches_the_agent_and_is_never_stored_or_logged(
    team, agents, messages_api, a2a_agents, caplog
):
    caplog.set_level(logging.DEBUG)
    a2a_profile(a2a_agents.card_url("answer"))
    messages_api(
        per_agent({"coach": [tool("ask_peer", {"peer": "scout", "prompt": "Index?"}), text("Ok")]})
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert Consultation.objects.get().status == "done"
    sent = {auth for path, auth in a2a_agents.seen}
    assert sent == {f"Bearer {TOKEN}"}
    dump = io.StringIO()
    call_command("dumpdata", "teams", stdout=dump)
    assert "SCOUT_A2A_TOKEN" in dump.getvalue()  # the variable's name is stored...
    assert TOKEN not in dump.getvalue()  # ...its value never
    # The fake agent's own server (a2a.server) logs the headers it got; Loom's side, the
    # SDK's client and the HTTP libraries below it among them, logs no token.
    ours = [r for r in caplog.records if not r.name.startswith(("a2a.server", "uvicorn"))]
    assert ours and not [r.name for r in ours if TOKEN in r.getMessage()]
