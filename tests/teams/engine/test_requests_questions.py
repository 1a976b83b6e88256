"""Questions and keeper context as a real model reads them: each test runs turns through
the real anthropic client against the fake Messages API and asserts on the requests
it received. The asker keeps its own question, an answer arrives next to it, nothing
invites an answer to a closed question, a forward names the original asker, an
answer comes once, an offload leaves one stub, and keeper enrichment is bounded,
filtered and labelled."""

import json
import re
from datetime import timedelta
from types import SimpleNamespace

from django.utils import timezone

from teams import services
from teams.conversation import keepers, questions
from teams.engine import loop, prompts
from teams.models import Keeper, Message, Query, Turn
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, forward_chain_script, key_in, per_agent
from tools.context import ContextOffload
from tools.conversation import SignalPhaseComplete
from tools.questions import PeerAnswerQuestion, PeerAskQuestion, PeerForwardQuestion

KEEPER_LABEL = "Relevant context from keepers (added by Loom, may be incomplete):"


def texts(request) -> list[str]:
    """The text blocks of a request's messages, in order."""
    return [
        block["text"]
        for message in request.body["messages"]
        for block in message["content"]
        if block.get("type") == "text"
    ]


def history(request) -> str:
    """A request's text blocks as one string (real newlines, unlike the JSON dump)."""
    return "\n\n".join(texts(request))


def everything(request) -> str:
    """Every text the request carries: its system, text blocks and tool results."""
    parts = [request.system_text]
    for message in request.body["messages"]:
        content = message["content"]
        for block in [{"text": content}] if isinstance(content, str) else content:
            value = block.get("text", block.get("content", ""))
            parts.append(value if isinstance(value, str) else json.dumps(value))
    return "\n\n".join(parts)


def of(api, name):
    return [r for r in api.requests if r.agent == name]


def hint(key: str) -> str:
    return f'{PeerAnswerQuestion.name} with query_id "{key}"'


def test_the_askers_later_requests_hold_its_own_question(team, messages_api):
    api = messages_api(
        per_agent(
            {
                "coach": [text("Go."), text("Go on.")],
                "researcher": [
                    tool(
                        PeerAskQuestion.name,
                        {"question": "What pattern does the auth module use?", "target": "coder"},
                    ),
                    text("Asked the coder."),
                    text("Still waiting."),
                ],
                "coder": [text("Busy.")],
                "reviewer": [text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=6)
    key = Query.objects.get().key
    later = texts(of(api, "researcher")[2])  # its next turn
    assert (
        f'[Your action] You asked coder (query {key}): "What pattern does the auth module use?"'
        in later
    )


def test_the_answer_arrives_next_to_its_question_with_the_chain(team, messages_api):
    api = messages_api(forward_chain_script())
    team_actions.team_start(team=team)
    drain(team, limit=6)
    key = Query.objects.get().key
    seen = history(of(api, "researcher")[-1])
    answer = seen[seen.index(f"[Answer from reviewer | Query: {key}]") :]
    assert answer.startswith(
        f"[Answer from reviewer | Query: {key}]\nHMAC with SHA-256.\n\n"
        "It answers the question researcher (you) asked coder: How do we sign tokens?\n\n"
        "Enrichments gathered during routing:\n"
        "coder, forwarding it to reviewer: Tokens are made in auth.py."
    )
    assert seen.count(f"[Answer from reviewer | Query: {key}]") == 1
    # The answerer's and the forwarder's records of their own calls say what they did.
    records = Message.objects.filter(kind=Message.Kind.TOOL_CALL)
    assert records.get(recipient__name="reviewer").content == (
        f'You answered {key} from researcher: "HMAC with SHA-256."'
    )
    assert records.get(recipient__name="coder").content == (
        f'You forwarded {key} to reviewer adding: "Tokens are made in auth.py."'
    )


def test_a_forwarded_query_names_the_original_asker(team, messages_api):
    api = messages_api(forward_chain_script())
    team_actions.team_start(team=team)
    drain(team, limit=6)
    key = Query.objects.get().key
    seen = history(of(api, "reviewer")[0])
    assert f"[Query from researcher | ID: {key}]\nHow do we sign tokens?" in seen
    assert (
        "Relevant context:\ncoder, forwarding it to reviewer: Tokens are made in auth.py." in seen
    )
    assert "[Query from coder" not in seen
    assert hint(key) in seen  # still open for the reviewer: it may answer


def test_no_request_after_an_answer_invites_one(team, messages_api):
    """A broadcast question answered by the coder: from then on no request of anyone
    (the coach and reviewer who also got it, the coder who answered) invites an answer
    to it, in this phase or the next."""

    def answer(request):
        return tool(PeerAnswerQuestion.name, {"query_id": key_in(request), "answer": "JSON."})

    api = messages_api(
        per_agent(
            {
                "coach": [
                    text("Go."),
                    tool(SignalPhaseComplete.name, {"summary": "Output format: JSON."}),
                    text("Planning now."),
                ],
                "researcher": [
                    tool(PeerAskQuestion.name, {"question": "Which output format?"}),
                    text("Asked."),
                    text("Thanks."),
                    text("Ok."),
                ],
                "coder": [answer, text("Answered."), text("Ok."), text("Ok.")],
                "reviewer": [text("Ok."), text("Ok."), text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=3)  # coach, researcher (asks), coder (answers)
    key = Query.objects.get().key
    assert hint(key) in history(of(api, "coder")[0])  # open, it was invited
    answered_at = len(api.requests)  # the first request after the coder's answering turn
    drain(team, limit=10)  # the phase closes on the coach's second turn; planning goes on
    assert Message.objects.filter(kind=Message.Kind.PHASE_SUMMARY).exists()
    after = api.requests[answered_at:]
    assert {r.agent for r in after} >= {"coach", "coder", "reviewer", "researcher"}
    for request in after:
        assert hint(key) not in everything(request), request.agent
        assert f"[Query from researcher | ID: {key}]" not in everything(request), request.agent
    # The asker reads the answer once, on its next turn (in the next phase, the answer
    # having come as the phase closed); after that the phase summary carries it.
    first, *later = [r for r in after if r.agent == "researcher"]
    assert history(first).count(f"[Answer from coder | Query: {key}]") == 1
    assert later and all(f"[Answer from coder | Query: {key}]" not in history(r) for r in later)


REPLIES = {PeerAnswerQuestion.name, PeerForwardQuestion.name}


def test_answer_and_forward_are_offered_only_while_a_question_is_open_to_the_agent(
    team, agents, messages_api
):
    """Their query_id cannot be known without a question routed to the agent: they are
    offered with one, and a call of one without is answered with why (no violation)."""
    api = messages_api(
        per_agent(
            {
                "coach": [text("Go."), text("Go on.")],
                "researcher": [
                    tool(PeerAskQuestion.name, {"question": "Which parser?", "target": "coder"}),
                    text("Asked."),
                    text("Thanks."),
                ],
                "coder": [
                    lambda r: tool(
                        PeerAnswerQuestion.name, {"query_id": key_in(r), "answer": "LALR."}
                    ),
                    text("Answered."),
                    tool(
                        PeerAnswerQuestion.name,
                        {"query_id": "q-1", "answer": "Again."},
                        "toolu_again",
                    ),
                    text("Nothing more."),
                ],
                "reviewer": [text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=7)  # coach, researcher (asks), coder (answers), reviewer, ..., coder
    offered = {(r.agent, i): REPLIES & set(r.tool_names) for i, r in enumerate(api.requests)}
    coder = of(api, "coder")
    assert REPLIES <= set(coder[0].tool_names)  # the question is open to it
    assert not REPLIES & set(coder[2].tool_names)  # its next turn: answered, none open
    assert all(not names for (agent, _), names in offered.items() if agent != "coder")
    result = next(
        block
        for message in coder[3].body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("tool_use_id") == "toolu_again"
    )
    assert result["is_error"] and result["content"] == (
        "Error: coder has no question open to answer: peer_answer_question needs the query_id "
        "of a question routed to coder that is still open (the agent's history shows each one "
        "with its query_id)."
    )
    agents["coder"].refresh_from_db()
    assert agents["coder"].violations == 0


def test_a_forwarded_away_question_leaves_the_forwarders_requests(team, messages_api):
    api = messages_api(
        per_agent(
            {
                "coach": [text("Go."), text("Go on.")],
                "researcher": [
                    tool(PeerAskQuestion.name, {"question": "Token expiry?", "target": "coder"}),
                    text("Asked."),
                    text("Waiting."),
                ],
                "coder": [
                    lambda r: tool(
                        PeerForwardQuestion.name,
                        {"query_id": key_in(r), "target": "reviewer", "enrichment": "Ask review."},
                    ),
                    text("Passed it on."),
                    text("Ok."),
                ],
                "reviewer": [text("Thinking."), text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=7)
    key = Query.objects.get().key
    coder = of(api, "coder")
    assert hint(key) in everything(coder[0])
    later = everything(coder[-1])  # its next turn, the question still open for the reviewer
    assert hint(key) not in later and f"[Query from researcher | ID: {key}]" not in later
    assert hint(key) in everything(of(api, "reviewer")[-1])


def test_an_expired_question_leaves_the_recipients_requests(team, agents, messages_api):
    api = messages_api(per_agent({"coder": [text("Nothing waiting.")]}))
    query = questions.ask(
        team=team, origin=agents["researcher"], question="Deadline?", target="coder"
    )
    Query.objects.filter(pk=query.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    drain(team, limit=1)  # the coder's inbox turn: past its TTL, no invitation
    (request,) = of(api, "coder")
    assert hint(query.key) not in everything(request) and "Deadline?" not in everything(request)
    assert questions.expire() == 1
    notice = Message.objects.get(query=query, kind=Message.Kind.SYSTEM)
    assert notice.recipient == agents["researcher"]
    assert "You can respond" not in notice.content


def test_a_question_is_never_forwarded_back_to_its_asker(team, messages_api):
    """The asker got its own question back (as the forwarder's) and answered itself:
    the answer reached it as if from someone else. Now the forward is refused, the
    coder answers, and the asker reads that answer once."""
    api = messages_api(
        per_agent(
            {
                "coach": [text("Go."), text("Go on.")],
                "researcher": [
                    tool(PeerAskQuestion.name, {"question": "Which port?", "target": "coder"}),
                    text("Asked."),
                    text("Thanks."),
                ],
                "coder": [
                    lambda r: tool(
                        PeerForwardQuestion.name,
                        {"query_id": key_in(r), "target": "researcher", "enrichment": "You know."},
                    ),
                    lambda r: tool(
                        PeerAnswerQuestion.name, {"query_id": key_in(r), "answer": "Port 8000."}
                    ),
                    text("Answered."),
                ],
                "reviewer": [text("Ok."), text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=10)
    query = Query.objects.get()
    refused = of(api, "coder")[1].body["messages"][-1]["content"][0]["content"]
    assert refused.startswith("researcher asked")
    assert not Message.objects.filter(recipient__name="researcher", kind="query").exists()
    assert query.status == "answered" and query.answered_by.name == "coder"
    seen = history(of(api, "researcher")[-1])
    assert seen.count(f"[Answer from coder | Query: {query.key}]") == 1
    assert "[Answer from researcher" not in json.dumps([r.body for r in api.requests])


def test_a_question_delivered_twice_is_read_once(team, messages_api):
    """Broadcast to the reviewer, then forwarded to it as well: the reviewer reads the
    newer delivery (with the forwarder's words) once, with one invitation."""
    api = messages_api(
        per_agent(
            {
                "coach": [text("Go.")],
                "researcher": [tool(PeerAskQuestion.name, {"question": "Cache?"}), text("Ok.")],
                "coder": [
                    lambda r: tool(
                        PeerForwardQuestion.name,
                        {"query_id": key_in(r), "target": "reviewer", "enrichment": "See LRU."},
                    ),
                    text("Passed."),
                ],
                "reviewer": [text("Reading.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=4)
    key = Query.objects.get().key
    seen = history(of(api, "reviewer")[0])
    assert seen.count(f"[Query from researcher | ID: {key}]") == 1
    assert seen.count(hint(key)) == 1
    assert "coder, forwarding it to reviewer: See LRU." in seen


def test_the_offload_tool_leaves_one_stub(team, agents, messages_api):
    for i in range(12):
        services.message_add(
            team=team, author=agents["researcher"], content=f"Parser design note {i}."
        )
    api = messages_api(
        per_agent(
            {
                "coder": [
                    tool(ContextOffload.name, {"topic": "parser design", "message_count": 5}),
                    text("Offloaded."),
                    text("Next turn."),
                ]
            }
        )
    )
    for _ in range(2):
        turn = Turn.objects.create(team=team, agent=agents["coder"], phase=team.phase)
        loop.run_turn(turn.id, "w")
    keeper = Keeper.objects.get()
    stub = (
        f'[Context offloaded] 5 earlier messages went to keeper {keeper.id} "parser design"; '
        f"recall them with context_retrieve(query, keeper_id={keeper.id})."
    )
    seen = history(of(api, "coder")[-1])
    assert seen.count(stub) == 1
    assert "Parser design note 0." not in seen and "Parser design note 5." in seen
    assert "offload" not in "".join(t for t in texts(of(api, "coder")[-1]) if "[Your action]" in t)


def test_the_automatic_offload_leaves_one_stub(team, agents, messages_api):
    for i in range(12):
        services.message_add(
            team=team, author=agents["reviewer"], content=f"Review note {i}: " + "detail " * 40
        )
    coder = agents["coder"]
    coder.context_budget_tokens = 1000
    coder.save()
    api = messages_api([text("Fine.")])
    turn = Turn.objects.create(team=team, agent=coder, phase=team.phase)
    loop.run_turn(turn.id, "w")
    seen = history(api.requests[0])
    for keeper in Keeper.objects.filter(agent=coder):
        stub = re.escape(f"went to keeper {keeper.id} ")
        assert len(re.findall(stub, seen)) == 1
        assert f"recall them with context_retrieve(query, keeper_id={keeper.id})." in seen
    assert seen.count("[Context offloaded]") == Keeper.objects.filter(agent=coder).count()
    assert "to stay within your context budget" in seen
    assert "(Context note)" not in seen


def test_an_automatic_offload_frees_enough_that_the_next_turn_keeps_its_cached_history(
    team, agents, messages_api
):
    # Each offload changes the start of the history, so the prompt cache after it is
    # written again: one offload goes down to half the budget, not just under the
    # trigger, and a turn or two of new lines later nothing is offloaded again.
    # A budget well above the system text, which no offload can shrink.
    for i in range(20):
        services.message_add(
            team=team, author=agents["reviewer"], content=f"Review note {i}: " + "detail " * 40
        )
    coder = agents["coder"]
    coder.context_budget_tokens = 2500
    coder.save()
    api = messages_api([text("Fine.")] * 2)
    loop.run_turn(Turn.objects.create(team=team, agent=coder, phase=team.phase).id, "w")
    assert Keeper.objects.filter(agent=coder).count() == 1
    first = api.requests[0]
    assert loop.estimate_tokens(_as_prompt(first)) <= 2500 * keepers.AUTO_OFFLOAD_DOWN_TO + 100
    services.message_add(team=team, author=agents["reviewer"], content="One more: " + "x " * 40)
    loop.run_turn(Turn.objects.create(team=team, agent=coder, phase=team.phase).id, "w")
    assert Keeper.objects.filter(agent=coder).count() == 1
    assert history(api.requests[1]).startswith(history(first)[:200])


def test_an_offload_stub_stays_in_its_phase(team, agents, messages_api):
    # The phase's summary is all later phases see of it: the stub of an offload made
    # in it (its keeper still searchable) goes with it.
    for i in range(12):
        services.message_add(
            team=team, author=agents["reviewer"], content=f"Review note {i}: " + "detail " * 40
        )
    coder = agents["coder"]
    coder.context_budget_tokens = 1500
    coder.save()
    api = messages_api([text("Fine.")] * 2)
    loop.run_turn(Turn.objects.create(team=team, agent=coder, phase=team.phase).id, "w")
    assert "[Context offloaded]" in history(api.requests[0])
    team = team_actions.phase_complete(team=team, agent=agents["coach"], summary="Reviewed.")
    loop.run_turn(Turn.objects.create(team=team, agent=coder, phase=team.phase).id, "w")
    later = history(api.requests[1])
    assert "Reviewed." in later and "[Context offloaded]" not in later


def _as_prompt(request):
    """The system and plain-text messages of a recorded request, as estimate_tokens reads."""
    system = [{"text": b["text"]} for b in request.body["system"]]
    messages = [
        {"content": "".join(b.get("text", "") for b in m["content"])}
        if isinstance(m["content"], list)
        else m
        for m in request.body["messages"]
    ]
    return SimpleNamespace(system=system, messages=messages)


def test_keeper_enrichment_is_bounded_filtered_and_labelled(team, agents, messages_api):
    long = "The parser streams tokens from large files in chunks. " * 60  # ~3,300 chars
    notes = [
        services.message_add(team=team, author=agents["coder"], content=f"{i}: {long}")
        for i in range(6)
    ]
    notes.append(  # only stop words and one term in common: no evidence of relevance
        services.message_add(
            team=team, author=agents["coach"], content="What is the plan for the parser?"
        )
    )
    notes.append(
        services.message_add(team=team, author=agents["coach"], content="What is it? How is it?")
    )
    keepers.offload(agent=agents["coder"], messages=notes, topic="parser design")
    api = messages_api(per_agent({"reviewer": [text("Reading.")]}))
    query = questions.ask(
        team=team,
        origin=agents["researcher"],
        question="What is the streaming design of the parser?",
        target="reviewer",
    )
    drain(team, limit=1)
    seen = history(of(api, "reviewer")[0])
    start = seen.index(KEEPER_LABEL)
    block = seen[start : seen.index("\n\nYou can respond using", start)]
    entries = block.splitlines()[1:]
    assert 1 <= len(entries) <= questions.ENRICHMENT_ENTRIES
    assert len(block) - len(KEEPER_LABEL) <= questions.ENRICHMENT_CHARS
    for entry in entries:
        assert entry.startswith("From keeper ") and '"parser design", [coder]: ' in entry
        assert len(entry) < questions.ENRICHMENT_ENTRY_CHARS + 60 and entry.endswith("…")
    assert "What is the plan" not in block and "How is it" not in block
    assert len(Query.objects.get(pk=query.pk).enrichments) == len(entries)


def test_a_question_of_stop_words_gets_no_enrichment(team, agents):
    note = services.message_add(team=team, author=agents["coder"], content="What is it? It is.")
    keepers.offload(agent=agents["coder"], messages=[note, note], topic="chatter")
    assert questions.keeper_enrichments(team, "What is it?") == []


def test_an_open_question_reads_once_without_a_mention_note(team, messages_api):
    """The researcher asks the coder and says so in its message, @naming the coder: the
    coder's request has the question in its inbox (with how to answer it), the
    researcher's own words, and no Loom note that the researcher addressed it. The
    coder passes it on, saying "@researcher's question": no note for the researcher
    either (it is not addressed)."""
    question = "How do we sign tokens?"
    api = messages_api(
        per_agent(
            {
                "coach": [text("Start."), text("Go on.")],
                "researcher": [
                    tool(PeerAskQuestion.name, {"question": question, "target": "coder"}),
                    text("I asked @coder how we sign tokens."),
                    text("Waiting."),
                ],
                "coder": [
                    lambda r: tool(
                        PeerForwardQuestion.name,
                        {"query_id": key_in(r), "target": "reviewer", "enrichment": "auth.py"},
                    ),
                    text("I passed @researcher's question on to @reviewer."),
                ],
                "reviewer": [text("Looking.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=6)
    key = Query.objects.get().key
    coder = history(of(api, "coder")[0])
    assert coder.count(question) == 1 and hint(key) in coder
    assert "[researcher]: I asked @coder how we sign tokens." in coder
    assert "specifically addressed you" not in coder
    researcher = history(of(api, "researcher")[-1])
    assert "[coder]: I passed @researcher's question on to @reviewer." in researcher
    assert "specifically addressed you" not in researcher
    # A plain @mention still gets its note.
    services.message_add(team=team, author=team.agents.get(name="coach"), content="@coder, status?")
    coder_agent = team.agents.get(name="coder")
    note = prompts.build(coder_agent, team).mention_note
    assert note.startswith("Note: coach specifically addressed you with @coder")
