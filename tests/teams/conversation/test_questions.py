"""How queries and answers reach agents, the router's limits, and the three end-to-end
scenarios (ask and answer, a forward chain, offload then retrieve) through the agent
loop and the fake Messages API."""

import re
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from teams import services
from teams.conversation import questions
from teams.engine import history_rows, loop, prompts
from teams.errors import InvalidInput, NotFound
from teams.models import Keeper, Message, Query, Team, Turn
from teams.run import team_actions, turns
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, forward_chain_script, key_in, make_turn, per_agent


def history_text(agent, team):
    return "\n".join(m.content for m in history_rows.history_messages(agent, team))


class TestProtocol:
    def test_received_query_is_in_the_next_prompt(self, team, agents):
        query = questions.ask(
            team=team, origin=agents["researcher"], question="Which parser?", target="coder"
        )
        assert f"[Query from researcher | ID: {query.key}]" in history_text(agents["coder"], team)
        assert query.key not in history_text(agents["reviewer"], team)

    def test_own_broadcast_is_not_received(self, team, agents):
        query = questions.ask(team=team, origin=agents["researcher"], question="Anyone?")
        assert query.key not in history_text(agents["researcher"], team)
        for name in ("coach", "coder", "reviewer"):
            assert query.key in history_text(agents[name], team)

    def test_answer_is_in_the_origin_prompt_with_enrichments(self, team, agents):
        query = questions.ask(team=team, origin=agents["researcher"], question="Q?", target="coder")
        questions.forward(
            team=team,
            key=query.key,
            forwarder=agents["coder"],
            target="reviewer",
            enrichment="I know half of it.",
        )
        questions.answer(team=team, key=query.key, answerer=agents["reviewer"], text="All of it.")
        seen = history_text(agents["researcher"], team)
        assert f"[Answer from reviewer | Query: {query.key}]\nAll of it." in seen
        assert (
            "Enrichments gathered during routing:\n"
            "coder, forwarding it to reviewer: I know half of it." in seen
        )

    def test_query_during_a_running_turn_waits_for_the_next_turn(self, team, agents, messages_api):
        """Delivered mid-turn: not in that turn's snapshot, not lost either."""
        coder = agents["coder"]
        api = messages_api([text("Working."), text("Now I see it.")])
        first = make_turn(coder, phase=team.phase)
        claimed = turns.turn_claim(first.id, "w")  # the turn's snapshot is taken here
        questions.ask(team=team, origin=agents["reviewer"], question="Mid-turn?", target="coder")
        loop.execute(claimed, "w")
        assert "Mid-turn?" not in api.requests[0].dump
        second = make_turn(coder, phase=team.phase)
        loop.run_turn(second.id, "w")
        assert "Mid-turn?" in api.requests[1].dump

    def test_forward_loop_stops_at_max_hops(self, team, agents):
        query = questions.ask(
            team=team, origin=agents["coach"], question="Loop?", target="researcher"
        )
        a, b = agents["researcher"], agents["coder"]
        hops = 0
        with pytest.raises(questions.MaxHopsReached, match="Maximum forwarding hops reached"):
            while True:
                forwarder, target = (a, b) if hops % 2 == 0 else (b, a)
                questions.forward(
                    team=team,
                    key=query.key,
                    forwarder=forwarder,
                    target=target.name,
                    enrichment=f"hop {hops}",
                )
                hops += 1
        query.refresh_from_db()
        assert hops == 5 == query.hop_count and query.status == "open"

    def test_unanswered_query_expires_and_origin_is_told(self, team, agents):
        query = questions.ask(
            team=team, origin=agents["researcher"], question="Anyone?", ttl_seconds=60
        )
        questions.forward(
            team=team, key=query.key, forwarder=agents["coder"], enrichment="Partial: use JSON."
        )
        assert questions.expire() == 0
        Query.objects.filter(pk=query.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        call_command("expire_queries")
        query.refresh_from_db()
        assert query.status == "expired" and query.hops[-1]["kind"] == "expire"
        notice = Message.objects.get(recipient=agents["researcher"], kind="system")
        assert notice.content.startswith(
            f"[Query expired | ID: {query.key}]\nNo answer to: Anyone?"
        )
        assert "Gathered during routing:\ncoder, forwarding it to everyone: Partial: use JSON." in (
            notice.content
        )
        with pytest.raises(NotFound, match="may have expired"):
            questions.answer(team=team, key=query.key, answerer=agents["coder"], text="late")

    def test_bad_input(self, team, agents):
        with pytest.raises(InvalidInput):
            questions.ask(team=team, question="  ")
        with pytest.raises(NotFound):
            questions.ask(team=team, question="?", target="ghost")
        query = questions.ask(team=team, question="?", target="coder")
        with pytest.raises(InvalidInput):
            questions.forward(team=team, key=query.key, forwarder=agents["coder"], enrichment="")


class TestWakeUps:
    def test_question_from_outside_wakes_an_idle_team_agent(self, team, agents, messages_api):
        def answer_it(request):
            key = re.search(r"ID: (q-[0-9a-f]+)", request.dump).group(1)
            return tool("peer_answer_question", {"query_id": key, "answer": "Use SQLite."})

        messages_api(per_agent({"coder": [answer_it, text("Answered.")]}))
        query = questions.ask(team=team, question="Which database?", target="coder")
        (turn,) = Turn.objects.filter(status="queued")
        assert turn.agent == agents["coder"] and turn.purpose == "inbox"
        drain(team)
        query.refresh_from_db()
        assert query.status == "answered" and query.answer == "Use SQLite."
        team.refresh_from_db()
        assert team.status == Team.Status.IDLE and team.turn_count == 0

    def test_running_team_does_not_get_extra_turns(self, team):
        team_actions.team_start(team=team)
        questions.ask(team=team, question="Which database?", target="coder")
        assert Turn.objects.filter(purpose="inbox").count() == 0

    def test_external_agents_are_not_woken(self, team):
        services.agent_create(team=team, name="bot", role="external")
        questions.ask(team=team, question="Hi bot?", target="bot")
        assert not Turn.objects.exists()


class TestAutomaticOffload:
    def test_over_80_percent_offloads_oldest_and_tells_the_agent(self, team, agents, messages_api):
        coder = agents["coder"]
        for i in range(20):  # a budget well above the system text
            services.message_add(
                team=team, author=agents["reviewer"], content=f"Review note {i}: " + "detail " * 40
            )
        coder.context_budget_tokens = 2000
        coder.save()
        api = messages_api([text("Fine.")])
        turn = make_turn(coder, phase=team.phase)
        loop.run_turn(turn.id, "w")
        first, *more = Keeper.objects.filter(agent=coder).order_by("id")
        assert first.entries.count() >= 3
        sent = api.requests[0].dump
        assert "Review note 0:" not in sent
        for keeper in (first, *more):  # one stub line for each offload
            assert sent.count(f'went to keeper {keeper.id} \\"earlier conversation') == 1
            assert f"recall them with context_retrieve(query, keeper_id={keeper.id})" in sent
        assert "to stay within your context budget" in sent
        assert loop.estimate_tokens(prompts.build(coder, team)) <= 1600
        assert "Review note 0" in first.entries.first().content

    def test_under_budget_nothing_happens(self, team, agents, messages_api):
        messages_api([text("Fine.")])
        services.message_add(team=team, author=agents["reviewer"], content="short")
        turn = make_turn(agents["coder"], phase=team.phase)
        loop.run_turn(turn.id, "w")
        assert not Keeper.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_twenty_threads_answer_the_same_query_once():
    team = services.team_create(
        slug="race", agents=[{"name": f"a{i}", "role": "researcher"} for i in range(21)]
    )
    origin = team.agents.get(name="a0")
    query = questions.ask(team=team, origin=origin, question="Who is first?")
    answerers = list(team.agents.exclude(pk=origin.pk))
    results, barrier = [], threading.Barrier(len(answerers))

    def answer(agent):
        try:
            barrier.wait()
            questions.answer(team=team, key=query.key, answerer=agent, text=f"{agent.name} won")
            results.append("won")
        except questions.QueryClosed as exc:
            results.append(exc.message)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=answer, args=(a,)) for a in answerers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count("won") == 1
    assert len(results) == 20
    query.refresh_from_db()
    assert all(
        r == f"Query {query.key} was already answered by {query.answered_by.name}."
        for r in results
        if r != "won"
    )
    assert Message.objects.filter(kind="answer").count() == 1
    assert Message.objects.get(kind="answer").content.startswith(
        f"[Answer from {query.answered_by.name} | Query: {query.key}]"
    )


# --- end to end, through the agent loop ---------------------------


def test_scenario_a_asks_b_and_b_answers(team, agents, messages_api):
    api = messages_api(
        per_agent(
            {
                "coach": [text("Let's go."), text("Carry on.")],
                "researcher": [
                    tool(
                        "peer_ask_question",
                        {"question": "What pattern does the auth module use?", "target": "coder"},
                        "toolu_ask",
                    ),
                    text("Asked the coder."),
                    text("Thanks, noted."),
                ],
                "coder": [
                    lambda r: tool(
                        "peer_answer_question",
                        {"query_id": key_in(r), "answer": "Bearer token pattern"},
                        "toolu_ans",
                    ),
                    text("Answered."),
                ],
                "reviewer": [text("OK.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=6)
    ask_result = api.requests[2].body["messages"][-1]["content"][0]["content"]
    assert ask_result.startswith("Question sent to coder. Query ID: q-")
    query = Query.objects.get()
    assert query.status == "answered" and query.answered_by == agents["coder"]
    assert [h["kind"] for h in query.hops] == ["ask", "answer"]
    researcher_later = [r for r in api.requests if r.agent == "researcher"][-1]
    assert (
        f"[Answer from coder | Query: {query.key}]\\nBearer token pattern" in researcher_later.dump
    )


def test_scenario_forward_chain_with_enrichment(team, agents, messages_api):
    api = messages_api(forward_chain_script())
    team_actions.team_start(team=team)
    drain(team, limit=6)
    reviewer_request = [r for r in api.requests if r.agent == "reviewer"][0]
    assert "[Query from researcher | ID: q-" in reviewer_request.dump  # the original asker
    assert "coder, forwarding it to reviewer: Tokens are made in auth.py." in reviewer_request.dump
    researcher_later = [r for r in api.requests if r.agent == "researcher"][-1].dump
    assert "HMAC with SHA-256." in researcher_later
    assert (
        "Enrichments gathered during routing:\\ncoder, forwarding it to reviewer: Tokens are "
        "made in auth.py." in researcher_later
    )
    query = Query.objects.get()
    assert [h["kind"] for h in query.hops] == ["ask", "forward", "answer"]


def test_scenario_offload_then_retrieve(team, agents, messages_api):
    for i in range(22):
        services.message_add(
            team=team,
            author=agents["researcher"],
            content=f"Auth research note {i}: tokens rotate every {i} days.",
        )
    api = messages_api(
        [
            tool("context_offload", {"topic": "auth research"}, "toolu_off"),
            tool("context_retrieve", {"query": "auth tokens rotate", "mode": "raw"}, "toolu_get"),
            text("Recalled."),
        ]
    )
    turn = make_turn(agents["coder"], phase=team.phase)
    loop.run_turn(turn.id, "w")
    keeper = Keeper.objects.get()
    offloaded = list(keeper.entries.values_list("content", flat=True))
    assert 5 <= len(offloaded) <= 9
    retrieved = api.requests[2].body["messages"][-1]["content"][0]["content"]
    assert offloaded[0] in retrieved
    offload_result = api.requests[1].body["messages"][-1]["content"][0]["content"]
    assert offload_result.startswith(f"Offloaded {len(offloaded)} messages. Keeper {keeper.id}")
    # The next turn no longer carries the offloaded messages.
    assert offloaded[0] not in history_text(agents["coder"], team)


def test_answer_after_ttl_is_refused_before_the_sweeper_runs(team, agents):
    query = questions.ask(team=team, origin=agents["researcher"], question="Late?", target="coder")
    Query.objects.filter(pk=query.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(NotFound, match="may have expired"):
        questions.answer(team=team, key=query.key, answerer=agents["coder"], text="Now.")
    with pytest.raises(NotFound, match="may have expired"):
        questions.forward(
            team=team, key=query.key, forwarder=agents["coder"], enrichment="x", target="reviewer"
        )
    assert questions.expire() == 1
