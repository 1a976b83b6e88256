"""Turns (teams.run.turns): queued turns withdrawn as one service, and an agent's inbox
wake-up that races another."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, connections, transaction

from teams.conversation import pm_requests, questions
from teams.live import events
from teams.models import Agent, PMRequest, Query, Turn
from teams.run import steering, stuck, team_actions, turns
from tests.helpers import make_team
from tests.teams.run.test_locks import _until_waiting

pytestmark = pytest.mark.django_db(transaction=True)


class Ears:
    """A channel in the team's group: what the team's page hears."""

    def __init__(self, team):
        self.team_id = team.id
        self.layer = get_channel_layer()
        self.channel = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(events.team_group(team.id), self.channel)

    def finished_turns(self) -> list[dict]:
        """The turns announced as finished until now (up to a marker sent last)."""
        events.publish(events.AgentNudged(agent="-", by="marker"), team_id=self.team_id)
        heard = []
        while (message := async_to_sync(self.layer.receive)(self.channel)).get("by") != "marker":
            heard.append(message)
        return [m["turn"] for m in heard if m["type"] == events.TurnFinished.name]


def _queued(team):
    return Turn.objects.get(team=team, status=Turn.Status.QUEUED)


def test_a_pause_announces_each_queued_turn_it_withdraws():
    team = make_team("alpha")
    team_actions.team_start(team=team)
    queued = _queued(team)
    ears = Ears(team)
    team_actions.team_pause(team=team)
    (finished,) = ears.finished_turns()
    assert finished["id"] == queued.id and finished["status"] == Turn.Status.CANCELLED
    assert Turn.objects.get(pk=queued.pk).status == Turn.Status.CANCELLED


def test_a_stuck_request_answered_pause_announces_the_withdrawn_turn():
    team = make_team("alpha")
    team_actions.team_start(team=team)
    queued = _queued(team)
    request = stuck.stuck_request_open(team=team, turn=queued, reason="going round")
    team.refresh_from_db()
    ears = Ears(team)
    pm_requests.pm_request_answer(request_id=request.id, answer=stuck.PAUSE_CHOICE)
    assert PMRequest.objects.get(pk=request.pk).status == PMRequest.Status.ANSWERED
    assert [t["id"] for t in ears.finished_turns()] == [queued.id]


def test_choosing_the_next_speaker_announces_the_turn_that_gives_way():
    team = make_team("alpha")
    team_actions.team_start(team=team)
    queued = _queued(team)  # the coach's
    ears = Ears(team)
    steering.team_next_speaker_set(team=team, agent=team.agents.get(name="coder"))
    (finished,) = ears.finished_turns()
    assert finished["id"] == queued.id and finished["status"] == Turn.Status.CANCELLED
    assert _queued(team).agent.name == "coder"


def test_taking_a_seat_announces_the_agents_queued_turn_it_replaces():
    team = make_team("alpha")
    team_actions.team_start(team=team)
    queued = _queued(team)  # the coach's
    ears = Ears(team)
    steering.agent_seat_take(agent=queued.agent, text="Plan: a state machine.")
    assert queued.id in [t["id"] for t in ears.finished_turns() if t["status"] == "cancelled"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a real race: PostgreSQL only")
def test_a_question_to_an_idle_agent_whose_wake_up_races_another_arrives():
    """Another wake-up of the agent is inserting its inbox turn, not committed yet: the
    question's own wake-up meets it (one active turn per agent) after its check. The
    question still arrives, and the one turn reads it."""
    team = make_team("alpha")
    coder = team.agents.get(name="coder")
    woken, go_on, errors = threading.Event(), threading.Event(), []

    def in_thread(work):
        try:
            work()
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def wake_and_hold():
        with transaction.atomic():
            assert turns.inbox_wake(Agent.objects.get(pk=coder.pk)) is not None
            woken.set()
            go_on.wait(10)

    def ask():
        reviewer = team.agents.get(name="reviewer")
        questions.ask(team=team, origin=reviewer, question="Which tests?", target="coder")

    first = threading.Thread(target=in_thread, args=(wake_and_hold,))
    first.start()
    assert woken.wait(10)
    second = threading.Thread(target=in_thread, args=(ask,))
    second.start()
    _until_waiting(1, errors)  # the question's insert waits for the other's turn
    go_on.set()
    first.join(30)
    second.join(30)
    assert errors == []
    assert Query.objects.filter(team=team, target=coder).count() == 1
    assert Turn.objects.filter(agent=coder, purpose=Turn.Purpose.INBOX).count() == 1
