"""Steering a run, through the fake Messages API: the PM's next speaker, nudge and seat
as the model reads them; a stuck team asks the PM once per episode and each answer
does what it says; a drifting agent sends one drift.alert per episode."""

import pytest

from teams.conversation import pm_requests, questions
from teams.errors import Conflict
from teams.integrations import webhooks
from teams.models import (
    STUCK_CHOICES,
    Agent,
    Message,
    PMRequest,
    Team,
    Turn,
    WebhookDelivery,
    WebhookEvent,
)
from teams.run import locks, steering, stuck, team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, make_turn

pytestmark = pytest.mark.django_db

NUDGE = "Keep the parser to one file, please."


def say(request):
    return text(f"{request.agent} here: nothing to add beyond the plan.")


def passes(request):
    return tool("pass_turn", {"reason": "nothing new"})


def speakers(team) -> list[str]:
    return list(
        Turn.objects.filter(team=team, purpose=Turn.Purpose.CONVERSATION)
        .exclude(status=Turn.Status.CANCELLED)
        .order_by("id")
        .values_list("agent__name", flat=True)
    )


def run(team, turns: int):
    """Run the team for `turns` conversation turns (its turn budget), then let it stop."""
    Team.objects.filter(pk=team.pk).update(max_turns=team.turn_count + turns)
    team.refresh_from_db()
    if team.status == Team.Status.IDLE:
        team_actions.team_start(team=team)
    elif team.status == Team.Status.PAUSED:  # at its turn budget: the PM raised it
        PMRequest.objects.filter(team=team, kind=PMRequest.Kind.BUDGET).update(
            status=PMRequest.Status.CANCELLED
        )
        team_actions.team_resume(team=team)
    drain(team)
    team.refresh_from_db()


# --- the PM steering -----------------------------------------------------------------


def blocks(request) -> list[dict]:
    """A request's content blocks, in order, each with its role."""
    return [
        {**block, "role": message["role"]}
        for message in request.body["messages"]
        for block in message["content"]
    ]


def test_a_nudge_is_read_whole_once_then_remembered_in_the_phase(team, agents, messages_api, pm):
    api = messages_api(say)
    steering.agent_nudge(agent=agents["coder"], text=NUDGE, user=pm)
    run(team, 12)  # three rounds, one phase

    by_agent = {}
    for request in api.requests:
        by_agent.setdefault(request.agent, []).append(request)
    assert [r.agent for r in api.requests][:4] == ["coach", "researcher", "coder", "reviewer"]
    coder_first, coder_second, coder_third = by_agent["coder"]
    tail = coder_first.body["messages"][-1]["content"][-1]["text"]
    assert tail.startswith("It is your turn, coder.")
    assert f"[Private note from the PM, to you only; act on it now]: {NUDGE}" in tail
    # Its later turns keep the PM's words, as a record where the nudged turn began (just
    # before what the coder said on it), not in their cue.
    record = f"[Private note from the PM, to you only, given for your next turn]: {NUDGE}"
    for later in (coder_second, coder_third):
        shown = blocks(later)
        at = next(i for i, b in enumerate(shown) if b["text"] == record)
        assert shown[at + 1] == {
            "type": "text",
            "text": "coder here: nothing to add beyond the plan.",
            "role": "assistant",
        }
        assert later.dump.count(NUDGE) == 1
        assert "act on it now" not in later.dump
    # The record came in after the last block the first request had: the second request
    # reads that prefix from the cache (breakpoint on the block before the record).
    second = blocks(coder_second)
    assert "cache_control" in second[[b["text"] for b in second].index(record) - 1]
    first = blocks(coder_first)
    assert [b["text"] for b in second[: len(first) - 1]] == [b["text"] for b in first[:-1]]
    for name in ("coach", "researcher", "reviewer"):
        assert all(NUDGE not in r.dump for r in by_agent[name]), name
    # The PM and the admin read it in the conversation, as a nudge to the coder.
    nudge = Message.objects.get(kind=Message.Kind.NUDGE)
    assert (nudge.recipient, nudge.author_label) == (agents["coder"], "pm (alice)")
    assert nudge.content == NUDGE


def test_a_long_nudge_is_remembered_shortened_and_not_past_its_phase(team, agents, messages_api):
    api = messages_api(say)
    long = "Keep the parser to one file. " * 40
    steering.agent_nudge(agent=agents["coder"], text=long)
    run(team, 8)
    coder = [r for r in api.requests if r.agent == "coder"]
    assert " ".join(long.split()) in coder[0].dump  # whole, in the cue
    records = [b["text"] for b in blocks(coder[1]) if b["text"].startswith("[Private note")]
    [record] = records
    assert len(record) < len(long) // 2 and record.endswith("…")
    # The next phase's requests no longer carry it (the phase's summary speaks for it).
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Scope agreed.")
    run(team, 4)
    coder = [r for r in api.requests if r.agent == "coder"]
    assert "Keep the parser to one file" not in coder[-1].dump


def test_the_pm_picks_the_next_speaker_once_then_the_rotation_resumes(team, agents, messages_api):
    messages_api(say)
    steering.team_next_speaker_set(team=team, agent=agents["reviewer"])
    run(team, 3)
    assert speakers(team) == ["reviewer", "coach", "researcher"]
    team.refresh_from_db()
    assert team.next_speaker is None

    # Chosen while a turn is queued for someone else: that turn gives way.
    Team.objects.filter(pk=team.pk).update(max_turns=10, status=Team.Status.RUNNING)
    team.refresh_from_db()
    from teams.run import turns

    queued = turns.enqueue_next(locks.team_lock(team))
    assert queued.agent.name == "coder"
    steering.team_next_speaker_set(team=team, agent=agents["coach"])
    drain(team, limit=2)
    assert speakers(team)[3:6] == ["coach", "researcher", "coder"]  # the third queued


def test_the_choice_outlives_a_pause_before_its_turn_begins(team, agents, messages_api):
    messages_api(say)
    steering.team_next_speaker_set(team=team, agent=agents["reviewer"])
    team_actions.team_start(team=team)
    team_actions.team_pause(team=Team.objects.get(pk=team.pk))  # before the turn began
    assert Turn.objects.get(team=team).status == Turn.Status.CANCELLED
    team.refresh_from_db()
    assert team.next_speaker == agents["reviewer"]
    run(team, 2)
    assert speakers(team) == ["reviewer", "coach"]
    team.refresh_from_db()
    assert team.next_speaker is None


def test_choosing_the_agent_already_queued_gives_it_one_turn(team, agents, messages_api):
    messages_api(say)
    Team.objects.filter(pk=team.pk).update(max_turns=3)
    team_actions.team_start(team=Team.objects.get(pk=team.pk))
    first = Turn.objects.get(team=team).agent
    steering.team_next_speaker_set(team=Team.objects.get(pk=team.pk), agent=first)
    drain(team)
    said = speakers(team)
    assert said[0] == first.name and said.count(first.name) == 1, said


def test_a_seat_taken_is_the_agents_turn_written_by_the_pm(team, agents, messages_api, pm):
    api = messages_api(say)
    plan = "Plan: a recursive-descent parser in parser.py, tests first."
    steering.agent_seat_take(agent=agents["coder"], text=plan, user=pm)
    team.refresh_from_db()
    assert team.turn_count == 1
    run(team, 4)
    # The rotation goes on after the coder.
    assert speakers(team) == ["coder", "reviewer", "coach", "researcher", "coder"]
    seat = Message.objects.get(kind=Message.Kind.SEAT)
    assert seat.author == agents["coder"] and seat.speaker == "coder (written by the PM)"
    reviewer = next(r for r in api.requests if r.agent == "reviewer")
    assert f"[coder (written by the PM)]: {plan}" in reviewer.dump
    coder = next(r for r in api.requests if r.agent == "coder")
    assert f"[The PM, in your seat, wrote this turn for you]: {plan}" in coder.dump


@pytest.mark.parametrize(
    "service",
    [
        lambda a: steering.team_next_speaker_set(team=a.team, agent=a),
        lambda a: steering.agent_nudge(agent=a, text=NUDGE),
        lambda a: steering.agent_seat_take(agent=a, text=NUDGE),
    ],
    ids=["next_speaker", "nudge", "seat"],
)
def test_a_done_team_refuses_steering_with_the_reason(team, agents, service):
    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE)
    before = Message.objects.count()
    with pytest.raises(Conflict, match="Team 'alpha' is done"):
        service(agents["coder"])
    assert Message.objects.count() == before and not Turn.objects.exists()


def test_a_seat_is_refused_while_the_agent_is_speaking(team, agents):
    make_turn(agents["coder"], status=Turn.Status.RUNNING)
    with pytest.raises(Conflict, match="coder is speaking now"):
        steering.agent_seat_take(agent=agents["coder"], text=NUDGE)


# --- stuck ---------------------------------------------------------------------------


def stuck_requests(team):
    return list(PMRequest.objects.filter(team=team, kind=PMRequest.Kind.STUCK))


def stuck_team(team, messages_api):
    """Everyone passes: after two rounds the team asks the PM, once."""
    messages_api(passes)
    Team.objects.filter(pk=team.pk).update(max_pass_rounds=2)
    run(team, 30)
    [request] = stuck_requests(team)
    assert team.status == Team.Status.AWAITING_PM
    assert team.turn_count == 8  # two rounds of four, then nothing more
    assert "everyone has passed for 2 rounds in a row" in request.question
    return request


def test_a_stuck_loop_opens_exactly_one_request(team, messages_api):
    request = stuck_team(team, messages_api)
    drain(team)
    assert stuck_requests(team) == [request]
    from teams.live.event_payloads import PMRequestOut

    assert PMRequestOut.of(request).choices == list(STUCK_CHOICES)


def test_close_the_phase_closes_it_and_the_team_goes_on(team, messages_api, pm):
    request = stuck_team(team, messages_api)
    pm_requests.pm_request_answer(request_id=request.id, answer="Close the phase", user=pm)
    team.refresh_from_db()
    assert (team.phase, team.status) == ("planning", Team.Status.RUNNING)
    summary = Message.objects.get(kind=Message.Kind.PHASE_SUMMARY)
    assert summary.content.startswith("[Phase refinement complete] The PM closed the phase")
    assert Turn.objects.filter(team=team, status=Turn.Status.QUEUED).exists()


def test_let_them_go_on_resumes_and_a_new_episode_needs_new_rounds(team, messages_api, pm):
    request = stuck_team(team, messages_api)
    pm_requests.pm_request_answer(request_id=request.id, answer="let them go on.", user=pm)
    team.refresh_from_db()
    assert team.status == Team.Status.RUNNING
    drain(team, limit=7)  # seven more passes: not yet two new rounds
    assert stuck_requests(team) == [request]
    drain(team, limit=1)
    assert len(stuck_requests(team)) == 2  # the eighth: a new episode


def test_pause_pauses(team, messages_api, pm):
    request = stuck_team(team, messages_api)
    pm_requests.pm_request_answer(request_id=request.id, answer="Pause", user=pm)
    team.refresh_from_db()
    assert team.status == Team.Status.PAUSED
    assert not Turn.objects.filter(team=team, status=Turn.Status.QUEUED).exists()


def test_another_answer_to_a_stuck_request_changes_nothing(team, messages_api, pm):
    from teams.errors import InvalidInput

    request = stuck_team(team, messages_api)
    with pytest.raises(InvalidInput, match="Close the phase, Let them go on, Pause"):
        pm_requests.pm_request_answer(request_id=request.id, answer="Keep going", user=pm)
    request.refresh_from_db()
    assert request.status == PMRequest.Status.OPEN


def test_a_phase_that_spent_its_turn_budget_asks_the_pm(team, messages_api):
    messages_api(say)
    Team.objects.filter(pk=team.pk).update(max_phase_turns=5)
    run(team, 30)
    [request] = stuck_requests(team)
    assert team.turn_count == 5
    assert "the phase has taken 5 turns, its budget of 5" in request.question


def test_two_agents_asking_each_other_over_and_over_are_stuck(team, agents):
    make_turn(agents["coach"], status=Turn.Status.DONE, phase=team.phase)
    Team.objects.filter(pk=team.pk).update(max_exchanges=3)
    team.refresh_from_db()
    for i in range(3):
        questions.ask(team=team, origin=agents["coder"], question=f"Which {i}?", target="reviewer")
    assert stuck.stuck_reason(team) == ""
    questions.ask(team=team, origin=agents["reviewer"], question="And you?", target="coder")
    assert stuck.stuck_reason(team) == (
        "coder and reviewer have exchanged 4 queries and forwards in this phase (more than 3)"
    )
    Team.objects.filter(pk=team.pk).update(max_exchanges=0)  # 0: the check is off
    team.refresh_from_db()
    assert stuck.stuck_reason(team) == ""


# --- drift alerts --------------------------------------------------------------------


def drifting(agent: Agent, violations=6):
    """Significant drift (25): an action with no tactic, six refused calls."""
    Agent.objects.filter(pk=agent.pk).update(
        trajectory="Write the parser.",
        trajectory_phase=agent.team.phase,
        tactic="",
        action="Edit files.",
        violations=violations,
    )


def alerts(team):
    return WebhookDelivery.objects.filter(webhook__team=team, event=WebhookEvent.DRIFT_ALERT)


def test_a_drifting_agent_sends_one_drift_alert_per_episode(
    team, agents, messages_api, loopback_allowed
):
    api = messages_api(say)
    webhooks.webhook_create(
        team=team, url="http://127.0.0.1:9/hook", events=[WebhookEvent.DRIFT_ALERT]
    )
    drifting(agents["coder"])
    run(team, 12)  # three rounds: the coder drifts on all three turns
    [alert] = alerts(team)
    assert alert.payload["data"]["agent"] == "coder"
    assert alert.payload["data"]["scores"] == [25, 25]
    coder = [r for r in api.requests if r.agent == "coder"]
    assert ["Drift alert" in r.dump for r in coder] == [False, False, True]
    assert "[Loom] Drift alert: your drift score was below 40" in coder[2].dump
    assert team.status != Team.Status.AWAITING_PM  # it does not stop the team

    drifting(agents["coder"], violations=0)  # recovers for a turn...
    run(team, 4)
    drifting(agents["coder"])  # ...and drifts again: a new episode
    run(team, 8)
    assert alerts(team).count() == 2
