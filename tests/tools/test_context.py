"""context_retrieve and context_offload: recall keepers, offload to them with a stub left."""

import pytest

from teams import services
from teams.conversation import keepers
from teams.engine import history_rows
from teams.models import Keeper
from tests.fakes.messages_api import text
from tests.helpers import make_turn
from tools import registry
from tools.base import MAX_RESULT_CHARS

TOPICS = [
    ("coder", "The auth module uses bearer tokens signed with HMAC."),
    ("reviewer", "Auth tokens expire after one hour; refresh is manual."),
    ("researcher", "The parser reads Markdown with front matter."),
    ("coder", "Rendering uses Jinja templates for every page."),
]


def run(ctx, name, **arguments):
    return registry.execute(name, arguments, ctx).text


@pytest.fixture
def history(team, agents):
    return [
        services.message_add(team=team, content=content, author=agents[who])
        for who, content in TOPICS * 3
    ]


@pytest.fixture
def keeper(history, agents):
    return keepers.offload(agent=agents["coder"], messages=history[:4], topic="auth research")


class TestRetrieve:
    def test_raw_keyword_lookup_returns_lines(self, ctx_for, keeper):
        result = run(ctx_for("coder"), "context_retrieve", query="bearer tokens")
        lines = result.splitlines()
        assert lines[0] == "[coder]: The auth module uses bearer tokens signed with HMAC."
        assert "[reviewer]: Auth tokens expire after one hour; refresh is manual." in lines
        assert all(line.startswith("[") for line in lines)

    def test_smart_question_is_answered_by_the_model(
        self, ctx_for, keeper, messages_api, agents, team
    ):
        api = messages_api(
            [text("Coder said bearer tokens signed with HMAC.", input_tokens=50, output_tokens=10)]
        )
        turn = make_turn(agents["coder"], status="running", model="claude-haiku-4-5")
        result = run(
            ctx_for("coder", turn=turn), "context_retrieve", query="How are auth tokens signed?"
        )
        assert result == "Coder said bearer tokens signed with HMAC."
        (request,) = api.requests
        assert request.system_text.startswith("You are a keeper")
        assert (
            f"(keeper {keeper.keeper.id} 'auth research') [coder]: The auth module" in request.dump
        )
        turn.refresh_from_db()
        assert turn.input_tokens == 50 and turn.cost_usd > 0

    def test_smart_not_found(self, ctx_for, keeper, messages_api):
        messages_api([text("NOT_FOUND")])
        assert (
            run(ctx_for("coder"), "context_retrieve", query="Who wrote the tokens spec?")
            == "No relevant context found for: Who wrote the tokens spec? (searched 1 keeper: "
            f'{keeper.keeper.id} "auth research"; this phase\'s conversation is in your '
            "history, not in a keeper). Try other words, or one keeper by its id."
        )

    def test_offline_smart_mode_extracts(self, ctx_for, keeper):
        result = run(ctx_for("coder"), "context_retrieve", query="How long do tokens last?")
        assert "expire after one hour" in result and "offline model" in result

    def test_specific_keeper(self, ctx_for, keeper, history, agents):
        other = keepers.offload(agent=agents["reviewer"], messages=history[4:8], topic="more auth")
        result = run(
            ctx_for("coder"),
            "context_retrieve",
            query="auth",
            keeper_id=other.keeper.id,
            mode="raw",
        )
        assert result.count("\n") + 1 == 2  # the two auth lines of that keeper only
        assert run(ctx_for("coder"), "context_retrieve", query="auth", keeper_id=999) == (
            "Keeper 999 not found in this team."
        )

    def test_not_found_is_friendly(self, ctx_for, keeper):
        assert run(ctx_for("coder"), "context_retrieve", query="kubernetes") == (
            "No relevant context found for: kubernetes (searched 1 keeper: "
            f'{keeper.keeper.id} "auth research"; this phase\'s conversation is in your '
            "history, not in a keeper). Try other words, or one keeper by its id."
        )

    def test_truncated_at_8000_characters(self, ctx_for, team, agents):
        long = [
            services.message_add(team=team, content="auth " + "x" * 990, author=agents["coder"])
            for _ in range(15)
        ]
        keepers.offload(agent=agents["coder"], messages=long, topic="long")
        result = run(ctx_for("coder"), "context_retrieve", query="auth", mode="raw")
        assert result.startswith("[coder]: auth")
        assert len(result) < MAX_RESULT_CHARS + 200
        assert "[Result truncated: showing 8,000 of" in result

    def test_mode_override_raw_on_a_question(self, ctx_for, keeper, messages_api):
        api = messages_api([])
        result = run(
            ctx_for("coder"), "context_retrieve", query="How are tokens signed?", mode="raw"
        )
        assert result.startswith("[coder]: The auth module uses bearer tokens")
        assert api.requests == []

    def test_unknown_mode_is_a_clear_error(self, ctx_for, keeper):
        result = registry.execute(
            "context_retrieve", {"query": "auth", "mode": "fuzzy"}, ctx_for("coder")
        )
        assert result.is_error and "mode" in result.text and "'smart' or 'raw'" in result.text
        with pytest.raises(keepers.InvalidInput, match="Unknown mode"):
            keepers.retrieve(team=keeper.keeper.team, query="auth", mode="fuzzy")
        with pytest.raises(keepers.InvalidInput, match="Smart mode needs a model"):
            keepers.retrieve(team=keeper.keeper.team, query="auth?", mode="smart")

    def test_mode_detection(self):
        assert keepers.detect_mode("How are tokens signed?") == "smart"
        assert keepers.detect_mode("should we stream") == "smart"
        assert keepers.detect_mode("bearer tokens") == "raw"


class TestOffload:
    def test_auto_split_at_topic_boundary(self, ctx_for, history, agents, team):
        result = run(ctx_for("coder", messages=history), "context_offload", topic="early talk")
        keeper = Keeper.objects.get()
        count = keeper.entries.count()
        assert 2 <= count <= 6  # about 30% of 12
        assert result == (
            f"Offloaded {count} messages. {keeper.index_entry} "
            f"Recall with context_retrieve(query, keeper_id={keeper.id})."
        )
        *remaining, stub = history_rows.history_messages(agents["coder"], team)
        assert [m.id for m in remaining] == [m.id for m in history[count:]]
        assert stub.content == (
            f"[Context offloaded] {count} earlier messages went to keeper {keeper.id} "
            f'"early talk"; recall them with context_retrieve(query, keeper_id={keeper.id}).'
        )
        # Another agent's context is untouched.
        assert len(history_rows.history_messages(agents["reviewer"], team)) == len(history)

    def test_explicit_count(self, ctx_for, history):
        result = run(
            ctx_for("coder", messages=history), "context_offload", topic="t", message_count=5
        )
        assert result.startswith("Offloaded 5 messages. Keeper ")

    def test_too_small_is_friendly(self, ctx_for, history):
        assert run(ctx_for("coder", messages=history[:2]), "context_offload", topic="t") == (
            "No messages to offload (context too small)."
        )
        assert run(ctx_for("coder"), "context_offload", topic="t", message_count=3) == (
            "No messages to offload (context too small)."
        )
        assert not Keeper.objects.exists()

    def test_offloaded_context_is_retrievable(self, ctx_for, history):
        ctx = ctx_for("coder", messages=history)
        run(ctx, "context_offload", topic="auth research", message_count=4)
        assert "bearer tokens" in run(ctx, "context_retrieve", query="bearer", mode="raw")
        assert len(ctx.messages) == len(history) - 4

    def test_topic_boundary_prefers_natural_breaks(self, team, agents):
        msgs = [
            services.message_add(team=team, content=f"parser detail {i}", author=agents["coder"])
            for i in range(3)
        ]
        msgs.append(
            services.message_add(
                team=team, content="Let's switch to deployment.", kind="pm", author_label="pm"
            )
        )
        msgs += [
            services.message_add(team=team, content=f"deploy step {i}", author=agents["coder"])
            for i in range(6)
        ]
        offloaded, kept = keepers.split_at_topic_boundary(msgs)
        assert len(offloaded) == 3 and kept[0].kind == "pm"


@pytest.mark.django_db(transaction=True)
def test_smart_retrieval_holds_no_transaction_open_during_the_model_call(ctx_for, agents):
    """With SQLite's IMMEDIATE transactions an open one would lock out every writer
    for as long as the model takes."""
    from django.db import connection

    note = services.message_add(team=agents["coder"].team, content="Tokens are signed.")
    keepers.offload(agent=agents["coder"], messages=[note, note], topic="auth")
    ctx = ctx_for("coder")
    in_transaction = []

    def ask_model(system, prompt, max_tokens):
        in_transaction.append(connection.in_atomic_block)
        return "They are signed."

    ctx.ask_model = ask_model
    record = []
    result = registry.execute(
        "context_retrieve", {"query": "How are tokens signed?"}, ctx, record=record.append
    )
    assert result.text == "They are signed." and in_transaction == [False]
    assert record == [result]


class TestSearchTerms:
    def test_stop_words_are_no_terms_unless_nothing_else(self):
        assert keepers.search_terms("What is the parser's streaming design?") == [
            "parser",
            "streaming",
            "design",
        ]
        assert keepers.search_terms("what is it") == ["what", "is", "it"]
        assert keepers.meaningful_terms("what is it") == []

    def test_distinct_in_order_and_capped(self):
        words = [f"word{i}" for i in range(100)]
        terms = keepers.search_terms(" ".join(words + words))
        assert terms == words[: keepers.MAX_SEARCH_TERMS]

    def test_the_worst_query_allowed_answers_fast(self):
        """Deduplicating with a list made a 60,000-word query take 18 s; only the first
        MAX_QUERY_CHARS characters are read now, each word looked up in a dict."""
        import time

        distinct = " ".join(f"w{i:05d}" for i in range(60_000))  # every word new
        repeated = "parser " * 60_000
        for query in (distinct, repeated):
            started = time.perf_counter()
            keepers.search_terms(query)
            assert time.perf_counter() - started < 0.5

    def test_a_huge_query_searches_fast(self, team, keeper):
        import time

        started = time.perf_counter()
        keepers.search(team=team, query=" ".join(f"w{i}" for i in range(60_000)) + " auth")
        assert time.perf_counter() - started < 0.5


def test_digests_say_what_was_looked_up_not_the_text(ctx_for, keeper, history):
    result = registry.execute(
        "context_retrieve", {"query": "bearer tokens", "mode": "raw"}, ctx_for("coder")
    )
    assert result.digest.startswith('You searched the keepers for "bearer tokens": got ')
    assert "HMAC" not in result.digest
    made = registry.execute(
        "context_offload", {"topic": "t", "message_count": 3}, ctx_for("coder", messages=history)
    )
    assert made.digest == ""  # the stub line is its record
    refused = registry.execute("context_offload", {"topic": "t"}, ctx_for("coder"))
    assert refused.digest.startswith('You tried to offload context as "t": No messages')
