"""Issue 22: a broadcast stores its question once, not once per recipient, and an
ask_multi stores its request once per batch. Every reader still shows the same text:
the recipient's prompt, its context page (API), the live event."""

import pytest
from django.db.models import Sum
from django.db.models.functions import Length

from teams.conversation import questions
from teams.engine import prompts
from teams.models import HUMAN_TEXT_LIMIT, ConsultantProfile, Consultation, Message, Query
from tests.helpers import make_team
from tools import registry

pytestmark = pytest.mark.django_db


def stored_bytes(team) -> int:
    """The characters the team's question rows and inbox messages hold."""
    messages = Message.objects.filter(team=team).aggregate(n=Sum(Length("content")))["n"] or 0
    asked = Query.objects.filter(team=team).aggregate(n=Sum(Length("question")))["n"] or 0
    return messages + asked


@pytest.fixture
def crowd(db):
    """A 40-agent team."""
    agents = [{"name": "coach", "role": "coach"}] + [
        {"name": f"agent{n}", "role": "coder"} for n in range(39)
    ]
    return make_team("crowd", agents=agents)


def test_a_max_size_broadcast_in_a_40_agent_team_stores_the_question_once(crowd, ctx_for):
    asker = crowd.agents.get(name="coach")
    before = stored_bytes(crowd)
    question = "q" * HUMAN_TEXT_LIMIT
    query = questions.ask(team=crowd, origin=asker, question=question)
    deliveries = Message.objects.filter(query=query, kind=Message.Kind.QUERY)
    assert deliveries.count() == 39  # everyone but the asker is told...
    assert not deliveries.filter(content__contains=question).exists()  # ...not sent a copy
    grown = stored_bytes(crowd) - before
    # The question once, and one short head line per recipient (was 39 copies: 780,000+).
    assert HUMAN_TEXT_LIMIT <= grown < HUMAN_TEXT_LIMIT + 39 * 60, grown
    # Each recipient reads the whole question, with how to answer it.
    recipient = crowd.agents.get(name="agent7")
    prompt = prompts.build(recipient, crowd)
    (said,) = [m["content"] for m in prompt.messages if query.key in m["content"]]
    assert f"[Query from coach | ID: {query.key}]\n{question}" in said
    assert f'query_id "{query.key}"' in said


def test_an_older_delivery_reads_the_chain_as_it_was_delivered(team, agents):
    query = questions.ask(team=team, origin=agents["coder"], question="Which parser?")
    questions.forward(
        team=team,
        key=query.key,
        forwarder=agents["reviewer"],
        enrichment="See auth.py.",
        target="researcher",
    )
    first, later = questions.delivered(
        list(Message.objects.filter(query=query, recipient=agents["researcher"]).order_by("id"))
    )
    assert "forwarding it" not in first.content
    assert "reviewer, forwarding it to researcher: See auth.py." in later.content


def test_an_ask_multi_request_is_stored_once_per_batch(team, ctx_for):
    for name in ("architect", "critic", "tester"):
        team.consultants.add(ConsultantProfile.objects.create(name=name, model="loom-offline"))
    prompt, context = "p" * HUMAN_TEXT_LIMIT, "c" * HUMAN_TEXT_LIMIT
    result = registry.execute("ask_multi", {"prompt": prompt, "context": context}, ctx_for("coder"))
    assert result.text.startswith("3 of 3 consultants answered."), result.text
    rows = Consultation.objects.order_by("id")
    assert [len(r.prompt) + len(r.context) for r in rows] == [2 * HUMAN_TEXT_LIMIT, 0, 0]
    # Every reader still has the request: read_consultation of the last one...
    last = rows.last()
    again = registry.execute("read_consultation", {"consultation_id": last.pk}, ctx_for("coder"))
    assert f"(general): {prompt[:100]}" in again.text
