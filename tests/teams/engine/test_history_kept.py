"""What a process keeps of an agent's last request is an optimisation, never the truth:
a request built with it equals, byte for byte, the one a process that kept nothing
(another worker) builds, after new messages, an offload, an edited message, a
question answered and a new phase."""

import json

from django.db import connection
from django.test.utils import CaptureQueriesContext

from teams import services
from teams.conversation import keepers, questions
from teams.engine import history_kept, prompts
from teams.models import Message, Team
from teams.run import team_actions


def _request(agent, team, phase=None):
    """The request a turn snapshotted now would send (cached blocks and plain text)."""
    team = Team.objects.get(pk=team.pk)  # a turn reads its team with its claim
    until = Message.objects.filter(team=team).order_by("-id").values_list("id", flat=True)[0]
    prompt = prompts.build(agent, team, until_id=until, phase=phase)
    return json.dumps(
        {
            "system": prompt.system,
            "blocks": prompt.blocks,
            "messages": prompt.messages,
            "snapshot": [m.id for m in prompt.snapshot],
        },
        ensure_ascii=False,
    )


def _warm_and_cold(agent, team, phase=None):
    warm = _request(agent, team, phase)
    history_kept.forget()  # another worker: it kept nothing
    cold = _request(agent, team, phase)
    assert warm == cold
    return warm


def _say(team, agent, text):
    return services.message_add(team=team, author=agent, content=text)


def test_a_kept_history_gives_the_request_a_cold_build_gives(team, agents):
    coder, reviewer, coach = agents["coder"], agents["reviewer"], agents["coach"]
    history_kept.forget()
    said = [_say(team, reviewer if i % 2 else coach, f"Point number {i}.") for i in range(12)]
    _request(coder, team)  # the coder's last request, kept

    # New messages: only they are read whole.
    _say(team, reviewer, "A new point, @coder.")
    with CaptureQueriesContext(connection) as read:
        warm = _request(coder, team)
    rows = [q["sql"] for q in read.captured_queries if '"teams_message"."content"' in q["sql"]]
    assert len(rows) == 1 and "A new point" in warm  # the new rows, not the old ones
    history_kept.forget()
    assert _request(coder, team) == warm

    # An offload takes its messages out of the history.
    _request(coder, team)
    keepers.offload(agent=coder, messages=said[:5], topic="early points")
    request = _warm_and_cold(coder, team)
    assert "Point number 0." not in request and "[Context offloaded] 5 earlier" in request

    # A question: shown while open, gone once answered.
    query = questions.ask(team=team, origin=reviewer, question="Which parser?", target="coder")
    assert "Which parser?" in _warm_and_cold(coder, team)
    questions.answer(team=team, key=query.key, answerer=coder, text="Recursive descent.")
    assert "Which parser?" not in _warm_and_cold(coder, team)

    # A new phase: the history starts again from the summary.
    _request(coder, team)
    team_actions.phase_complete(team=team, agent=coach, summary="Scope agreed.")
    team.refresh_from_db()
    _say(team, reviewer, "Planning starts.")
    request = _warm_and_cold(coder, team, phase=team.phase)
    assert "Scope agreed." in request and "Point number 11." not in request


def test_a_renamed_agent_is_read_again(team, agents):
    coder, reviewer = agents["coder"], agents["reviewer"]
    history_kept.forget()
    _say(team, reviewer, "Tests for each token kind.")
    _request(coder, team)
    reviewer.name = "checker"
    services.agent_update(agent=reviewer, fields=["name"])
    request = _warm_and_cold(coder, team)
    assert "[checker]: Tests for each token kind." in request


def test_a_turns_statements_stay_flat_as_the_history_grows(team, agents, messages_api):
    """A steady turn reads only what is new: as many SQL statements at turn 40 as at
    turn 16, however long the phase's history has grown."""
    from teams.engine import loop
    from teams.models import Turn
    from tests.fakes.messages_api import text

    messages_api(lambda request: text(f"{request.agent}: noted, carrying on."))
    Team.objects.filter(pk=team.pk).update(phases=["work"], max_turns=100, max_cost_usd=1000)
    team.refresh_from_db()
    team_actions.team_start(team=team)

    def statements_per_round() -> list[int]:
        counts = []
        for _ in range(4):  # one turn of each agent
            turn = Turn.objects.filter(team=team, status=Turn.Status.QUEUED).get()
            with CaptureQueriesContext(connection) as ran:
                loop.run_turn(turn.id, "test-worker")
            counts.append(len(ran.captured_queries))
        return counts

    for _ in range(3):
        statements_per_round()
    early = statements_per_round()
    for _ in range(5):
        statements_per_round()
    late = statements_per_round()
    # Flat: growth with the history would add to every turn. One statement of give in a
    # round, for a check one turn makes and another skips (PostgreSQL once gave
    # [34, 32, 32, 33] then [34, 32, 32, 32]; its source is not found yet).
    assert sum(late) <= sum(early) + 1, (early, late)
    assert max(late) <= STEADY_TURN_STATEMENTS, (early, late)


# Measured on SQLite and PostgreSQL alike: 20 for a steady turn of a priced model
# inside a test's transaction, 21 for the coach's (who passed since it spoke): the
# claim (2) and its live event (1), the request (2: its history's ids and new rows),
# the finish with the call's step (a savepoint and its release, and 8), queueing the
# next turn (2), and the stuck checks a team has by default (3). Outside a test, the
# savepoint is a BEGIN on SQLite and nothing on PostgreSQL. The goal of 10 is not met
# (docs/benchmarks.md); what this test holds is flatness.
STEADY_TURN_STATEMENTS = 21
