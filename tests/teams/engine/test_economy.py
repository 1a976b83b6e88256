"""The context economy's mechanisms, on the requests the fake Messages API received:
passes and earlier phases stay out of later requests, the cache breakpoints sit
where a request's stable prefix ends, and an agent's next request reads its
history from the cache, counted and priced at the cache-read price."""

from decimal import Decimal

import pytest

from teams import services
from teams.engine import prompts
from teams.lib.catalog import Usage, cost_of
from teams.models import Turn
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tools.conversation import PassTurn, SignalPhaseComplete
from tools.peers import PeerDiscovery


@pytest.fixture
def counting_api(messages_api):
    """A fake Messages API that counts the input it receives and caches prefixes."""
    return lambda script: messages_api(script, count_tokens=True)


def of(api, name):
    return [r for r in api.requests if r.agent == name]


def history_texts(request) -> list[str]:
    """The text blocks of a request's messages, in order."""
    return [
        block["text"]
        for message in request.body["messages"]
        for block in message["content"]
        if block.get("type") == "text"
    ]


def block_at(request, where: str) -> dict:
    """The block a breakpoint name (messages[i][j], system[i], tools[i]) points at."""
    part, *indexes = where.replace("]", "").split("[")
    item = request.body[part][int(indexes[0])]
    return item["content"][int(indexes[1])] if part == "messages" else item


@pytest.fixture
def two_rounds(team, counting_api):
    """Two rounds of the four agents: the researcher passes in the first."""
    api = counting_api(
        per_agent(
            {
                "coach": [text("Welcome. Let us scope the parser."), text("Good progress.")],
                "researcher": [
                    tool(PassTurn.name, {"reason": "agreed"}, "toolu_pass", say="PASS-TEXT"),
                    text("Prior art: three parsers, all recursive descent."),
                ],
                "coder": [text("I propose a tokenizer and a parser."), text("Tokenizer first.")],
                "reviewer": [text("Tests for each token kind."), text("Agreed on the order.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=8)
    return api


def test_a_pass_adds_nothing_to_later_requests(two_rounds):
    after_pass = two_rounds.requests[2:]
    assert [r.agent for r in after_pass] == ["coder", "reviewer", "coach", "researcher"] + [
        "coder",
        "reviewer",
    ]
    for request in after_pass:
        assert "PASS-TEXT" not in request.dump and "passes" not in request.dump
    for request in after_pass[:2]:  # before the coach and the researcher speak again
        assert not any("researcher" in t for t in history_texts(request))
    # The coach's cue names who passed (not why); nothing else of the pass is sent.
    coach = after_pass[2]
    (cue,) = [t for t in history_texts(coach) if "researcher" in t]
    assert cue.startswith(
        "It is your turn, coach.\n\nSince you last spoke, researcher passed (nothing to add)."
    )
    # The coder's first request holds the opening, the coach's line and the cue: the
    # researcher's turn in between left no trace.
    coder = of(two_rounds, "coder")[0]
    line, cue = history_texts(coder)[1:]
    assert line == "[coach]: Welcome. Let us scope the parser."
    assert cue.startswith("It is your turn, coder.\n\nYour intent")


def test_a_phase_change_drops_earlier_phases_but_the_summary(team, counting_api):
    api = counting_api(
        per_agent(
            {
                "coach": [
                    text("Refinement: what does the parser accept?"),
                    tool(SignalPhaseComplete.name, {"summary": "Scope: JSON subset only."}),
                ],
                "researcher": [text("OLD-PHASE-LINE from research."), text("On to planning.")],
                "coder": [text("OLD-PHASE-LINE from the coder.")],
                "reviewer": [text("OLD-PHASE-LINE from review.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=6)
    team.refresh_from_db()
    assert team.phase == "planning"
    first_of_planning = api.requests[-1]
    assert first_of_planning.agent == "researcher"
    sent = first_of_planning.dump
    assert "OLD-PHASE-LINE" not in sent and "what does the parser accept" not in sent
    assert "[Phase refinement complete] Scope: JSON subset only." in sent
    assert "Current phase: planning" in sent
    # The researcher's own line of the old phase is gone too.
    assert all(m["role"] == "user" for m in first_of_planning.body["messages"])


def test_cache_breakpoints_sit_where_the_stable_prefix_ends(two_rounds):
    for request in two_rounds.requests:
        marks = request.breakpoints
        assert len(marks) <= prompts.MAX_CACHE_BREAKPOINTS
        # The tools' last definition, then the stable system text (the anchors and
        # everything volatile come after it).
        assert marks[:2] == [f"tools[{len(request.body['tools']) - 1}]", "system[0]"]
        assert "Your name is" in request.body["system"][0]["text"]
        # The history's end is the last marked block; only the cue (and the @mention
        # note) follow it, in the last message.
        last = request.body["messages"][-1]["content"]
        assert last[-1]["text"].startswith(f"It is your turn, {request.agent}.")
        assert marks[-1] != f"messages[{len(request.body['messages']) - 1}][{len(last) - 1}]"
        assert "cache_control" not in last[-1]
    # An agent's second request marks the last block its first request had (its
    # history's end then: where that request wrote the cache) and its new history end.
    first, second = of(two_rounds, "coder")
    assert len(second.breakpoints) == 4
    read, written = (block_at(second, w) for w in second.breakpoints[2:])
    assert read["text"] == block_at(first, first.breakpoints[-1])["text"]
    assert read["text"] == "[coach]: Welcome. Let us scope the parser."
    assert written["text"] == "[researcher]: Prior art: three parsers, all recursive descent."
    # Between them: the coder's own line and the lines the others said since.
    texts = history_texts(second)
    between = texts[texts.index(read["text"]) + 1 : texts.index(written["text"]) + 1]
    assert between == [
        "I propose a tokenizer and a parser.",
        "[reviewer]: Tests for each token kind.",
        "[coach]: Good progress.",
        "[researcher]: Prior art: three parsers, all recursive descent.",
    ]


def test_the_second_request_reads_its_history_from_the_cache(two_rounds, team):
    first, second = of(two_rounds, "coder")
    # The first wrote its system text and history (the tools' prefix, which every
    # agent but the coach shares, the researcher's request had written).
    assert first.usage["cache_creation_input_tokens"] > 0
    # The second reads everything up to its first request's history end.
    assert second.usage["cache_read_input_tokens"] > first.usage["cache_read_input_tokens"]
    assert second.usage["cache_read_input_tokens"] == (
        first.usage["cache_read_input_tokens"] + first.usage["cache_creation_input_tokens"]
    )
    # Written now: only what is new since (the lines between the two breakpoints).
    assert 0 < second.usage["cache_creation_input_tokens"] < first.usage["cache_read_input_tokens"]
    # The turn stores what the API reported.
    turn = Turn.objects.filter(agent__name="coder").order_by("id").last()
    assert turn.cache_read_tokens == second.usage["cache_read_input_tokens"]
    assert turn.cache_creation_tokens == second.usage["cache_creation_input_tokens"]
    assert turn.input_tokens == second.usage["input_tokens"]
    # ...and its cost prices the read at a tenth of input and the write at 1.25x.
    usage = Usage(
        input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens,
        cache_creation_tokens=turn.cache_creation_tokens,
        cache_read_tokens=turn.cache_read_tokens,
    )
    assert turn.cost_usd == cost_of(turn.model, usage)


def test_within_a_turn_the_next_call_reads_the_whole_history(team, counting_api):
    # A tool call and the reply after it: two calls of one turn, the same prefix.
    api = counting_api(
        per_agent({"coach": [tool(PeerDiscovery.name, {}, "toolu_d"), text("Everyone is here.")]})
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    first, second = api.requests
    assert second.breakpoints == first.breakpoints
    assert second.usage["cache_read_input_tokens"] == (
        first.usage["cache_read_input_tokens"] + first.usage["cache_creation_input_tokens"]
    )
    assert second.usage["cache_creation_input_tokens"] == 0


def test_cache_reads_and_writes_are_priced_at_their_prices(db):
    model = "claude-sonnet-4-6"
    million = 1_000_000
    plain = cost_of(model, Usage(input_tokens=million))
    assert plain == Decimal("3")
    assert cost_of(model, Usage(cache_read_tokens=million)) == plain * Decimal("0.1")
    assert cost_of(model, Usage(cache_creation_tokens=million)) == plain * Decimal("1.25")


def test_the_offline_model_gets_plain_text(team, agents):
    """Providers without a prompt cache get one string per run of same-role lines."""
    services.message_add(team=team, author=agents["reviewer"], content="A point.")
    services.message_add(team=team, author=agents["coach"], content="@coder your view?")
    services.message_add(team=team, author=agents["coder"], content="Mine.")
    prompt = prompts.build(agents["coder"], team)
    plain = prompts.request_messages(prompt, cached=False)
    blocks = prompts.request_messages(prompt, cached=True)
    assert all(isinstance(m["content"], str) for m in plain)
    assert [m["role"] for m in plain] == [m["role"] for m in blocks]
    for text_, message in zip(plain, blocks, strict=True):
        assert text_["content"] == "\n\n".join(b["text"] for b in message["content"])
