"""The question tools: peer_ask_question, peer_answer_question, peer_forward_question."""

import re

import pytest

from teams import services
from teams.conversation import keepers, questions
from teams.engine import prompts
from teams.models import Message, Query
from tools import registry


def run(ctx, name, **arguments):
    return registry.execute(name, arguments, ctx).text


def query_id(text):
    return re.search(r"q-[0-9a-f]{12}", text).group(0)


class TestAsk:
    def test_targeted_question_reaches_only_the_target(self, ctx_for, agents, team):
        result = run(
            ctx_for("researcher"), "peer_ask_question", question="Which parser?", target="coder"
        )
        key = query_id(result)
        assert result == (
            f"Question sent to coder. Query ID: {key}. The answer will be "
            "delivered to you when available."
        )
        (message,) = questions.delivered(Message.objects.filter(kind="query"))
        assert message.recipient == agents["coder"]
        assert message.content.startswith(f"[Query from researcher | ID: {key}]\nWhich parser?")
        # The recipient's prompt says how to reply.
        (rendered,) = [
            m for m in prompts.build(agents["coder"], team).messages if key in m["content"]
        ]
        assert f'peer_answer_question with query_id "{key}"' in rendered["content"]

    def test_broadcast_skips_the_asker(self, ctx_for):
        result = run(ctx_for("researcher"), "peer_ask_question", question="Anyone?")
        assert result.startswith("Question sent to all agents. Query ID: q-")
        recipients = set(
            Message.objects.filter(kind="query").values_list("recipient__name", flat=True)
        )
        assert recipients == {"coach", "coder", "reviewer"}

    def test_extra_context_is_prepended(self, ctx_for):
        run(
            ctx_for("researcher"),
            "peer_ask_question",
            question="Which parser?",
            target="coder",
            context="We need streaming.",
        )
        query = Query.objects.get()
        assert query.question == "Which parser?\n\nContext from researcher: We need streaming."

    def test_keeper_context_enriches_the_question(self, ctx_for, team, agents):
        note = services.message_add(
            team=team, content="The parser must stream large files.", author=agents["coder"]
        )
        keepers.offload(agent=agents["coder"], messages=[note], topic="parser notes")
        run(
            ctx_for("researcher"),
            "peer_ask_question",
            question="What about the parser?",
            target="reviewer",
        )
        (message,) = questions.delivered([Message.objects.get(kind="query")])
        keeper = keepers.Keeper.objects.get()
        assert (
            "\n\nRelevant context from keepers (added by Loom, may be incomplete):\n"
            f'From keeper {keeper.id} "parser notes", [coder]: The parser must stream'
        ) in message.content

    def test_unknown_target_and_self(self, ctx_for):
        assert run(
            ctx_for("researcher"), "peer_ask_question", question="?", target="ghost"
        ).startswith("No agent named 'ghost'")
        assert "cannot ask yourself" in run(
            ctx_for("researcher"), "peer_ask_question", question="?", target="researcher"
        )
        assert not Query.objects.exists()


@pytest.fixture
def asked(ctx_for):
    return query_id(
        run(ctx_for("researcher"), "peer_ask_question", question="Auth pattern?", target="coder")
    )


class TestAnswer:
    def test_answer_reaches_the_origin(self, ctx_for, agents, asked):
        assert (
            run(ctx_for("coder"), "peer_answer_question", query_id=asked, answer="Bearer tokens.")
            == f"Answer delivered for query {asked}."
        )
        message = Message.objects.get(kind="answer")
        assert message.recipient == agents["researcher"]
        assert message.content == (
            f"[Answer from coder | Query: {asked}]\nBearer tokens.\n\n"
            "It answers the question researcher (you) asked coder: Auth pattern?"
        )
        query = Query.objects.get()
        assert query.status == "answered" and query.answered_by == agents["coder"]
        assert [h["kind"] for h in query.hops] == ["ask", "answer"]

    def test_unknown_query_is_friendly(self, ctx_for):
        assert (
            run(ctx_for("coder"), "peer_answer_question", query_id="q-000000000000", answer="x")
            == "Query q-000000000000 not found (may have expired)."
        )

    def test_second_answer_is_refused(self, ctx_for):
        # A question for everyone: any recipient may answer it, the first one wins.
        asked = query_id(run(ctx_for("researcher"), "peer_ask_question", question="Auth?"))
        run(ctx_for("coder"), "peer_answer_question", query_id=asked, answer="First.")
        assert (
            run(ctx_for("reviewer"), "peer_answer_question", query_id=asked, answer="Second.")
            == f"Query {asked} was already answered by coder."
        )
        assert Message.objects.filter(kind="answer").count() == 1

    def test_answer_carries_enrichments(self, ctx_for, asked):
        run(
            ctx_for("coder"),
            "peer_forward_question",
            query_id=asked,
            target="reviewer",
            enrichment="Auth lives in auth.py.",
        )
        run(ctx_for("reviewer"), "peer_answer_question", query_id=asked, answer="Bearer.")
        answer = Message.objects.get(kind="answer")
        assert answer.content.endswith(
            "Bearer.\n\nIt answers the question researcher (you) asked coder: Auth pattern?\n\n"
            "Enrichments gathered during routing:\ncoder, forwarding it to reviewer: Auth lives "
            "in auth.py."
        )


class TestForward:
    def test_forward_to_named_target_with_enrichment(self, ctx_for, agents, asked):
        assert run(
            ctx_for("coder"),
            "peer_forward_question",
            query_id=asked,
            target="reviewer",
            enrichment="See auth.py.",
        ) == ("Question forwarded to reviewer with enrichment.")
        forwarded = Message.objects.filter(kind="query", recipient=agents["reviewer"]).get()
        (forwarded,) = questions.delivered([forwarded])
        # The original asker, not the forwarder; the chain says who passed it on.
        assert forwarded.content.startswith(f"[Query from researcher | ID: {asked}]")
        assert "Relevant context:\ncoder, forwarding it to reviewer: See auth.py." in (
            forwarded.content
        )
        query = Query.objects.get()
        assert query.hop_count == 1 and query.hops[-1]["to"] == "reviewer"

    def test_forward_without_target_rebroadcasts(self, ctx_for, asked):
        assert (
            run(ctx_for("coder"), "peer_forward_question", query_id=asked, enrichment="Not me.")
            == "Question forwarded to all agents with enrichment."
        )
        names = list(Message.objects.filter(kind="query").values_list("recipient__name", flat=True))
        assert sorted(names) == ["coach", "coder", "reviewer"]  # coder: the first ask

    def test_max_hops(self, ctx_for, asked):
        Query.objects.update(max_hops=1)
        run(
            ctx_for("coder"),
            "peer_forward_question",
            query_id=asked,
            target="reviewer",
            enrichment="hop one",
        )
        assert run(
            ctx_for("reviewer"),
            "peer_forward_question",
            query_id=asked,
            target="coder",
            enrichment="hop two",
        ) == ("Maximum forwarding hops reached. Consider answering with what you know.")

    def test_unknown_query(self, ctx_for):
        assert (
            run(
                ctx_for("coder"),
                "peer_forward_question",
                query_id="q-nope",
                target="reviewer",
                enrichment="x",
            )
            == "Query q-nope not found (may have expired)."
        )


class TestInboxLine:
    def test_an_open_question_carries_the_reply_hint_until_answered(self, ctx_for, agents, asked):
        from tools.questions import inbox_line

        message = Message.objects.get(kind="query")
        assert inbox_line(message, agents["coder"]) == (
            f"{message.content}\n\nYou can respond using peer_answer_question with query_id "
            f'"{asked}", or forward the question (peer_forward_question) to another agent if '
            "someone else is better suited to answer."
        )
        run(ctx_for("coder"), "peer_answer_question", query_id=asked, answer="Bearer.")
        message.query.refresh_from_db()
        assert inbox_line(message, agents["coder"]) is None

    def test_a_repeated_answer_is_read_once(self, ctx_for, agents, asked, team):
        from tools.questions import inbox_line

        run(ctx_for("coder"), "peer_answer_question", query_id=asked, answer="Bearer.")
        first = Message.objects.get(kind="answer")
        again = services.message_add(
            team=team,
            content=first.content,
            kind="answer",
            author=agents["coder"],
            recipient=agents["researcher"],
            query=first.query,
        )
        assert inbox_line(first, agents["researcher"]) == first.content
        assert inbox_line(again, agents["researcher"]) is None

    def test_the_asker_cannot_answer_or_forward_its_own_question(self, ctx_for, asked):
        assert "yourself" in run(
            ctx_for("researcher"), "peer_answer_question", query_id=asked, answer="x"
        )
        assert "yourself" in run(
            ctx_for("researcher"),
            "peer_forward_question",
            query_id=asked,
            target="reviewer",
            enrichment="x",
        )
        assert Query.objects.get().status == "open"

    def test_digests(self, ctx_for, asked):
        ask = registry.execute("peer_ask_question", {"question": "Which DB?"}, ctx_for("reviewer"))
        key = query_id(ask.text)
        assert ask.digest == f'You asked everyone (query {key}): "Which DB?"'
        forward = registry.execute(
            "peer_forward_question",
            {"query_id": asked, "target": "reviewer", "enrichment": "See auth.py."},
            ctx_for("coder"),
        )
        assert forward.digest == f'You forwarded {asked} to reviewer adding: "See auth.py."'
        answer = registry.execute(
            "peer_answer_question", {"query_id": asked, "answer": "Bearer."}, ctx_for("reviewer")
        )
        assert answer.digest == f'You answered {asked} from researcher: "Bearer."'
