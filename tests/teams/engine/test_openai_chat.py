"""The OpenAI-style provider: the real openai SDK against the fake Chat Completions
server (tests/fakes/openai_api.py), streamed (a turn) and plain (a tool's own
question). Teams on `fake/…` ids run to done with tool calls in every phase; several
calls in one reply; arguments in many chunks; arguments that are not JSON answered
with an "Error:" the model corrects; 429 retried; 401 and an unknown model pause the
team saying why; cached tokens at the cached price; the pre-call budget check; a
replay that asks the fake nothing; the body sent as Loom translated it (the SDK's
transform skipped); one SDK client per endpoint, made again when its key or address
changes."""

import json
from decimal import Decimal

import pytest

from teams.engine import replay
from teams.engine.openai_chat import _read_choice, _Reply, chat_messages, chat_tool
from teams.engine.providers import provider_for
from teams.errors import ModelError
from teams.models import Message, ModelEndpoint, PMRequest, Replay, Team, Turn, TurnStep
from teams.run import team_actions
from tests.fakes.openai_api import Completion, Error, ToolCall
from tests.helpers import drain, make_team, price_model

pytestmark = pytest.mark.django_db

TRIO = [
    {"name": "coach", "role": "coach", "model": "fake/gpt-coach"},
    {"name": "coder", "role": "coder", "model": "fake/gpt-coder"},
    {"name": "reviewer", "role": "reviewer", "model": "fake/gpt-review"},
]


def trio(**kwargs):
    return make_team("trio", agents=TRIO, phases=["design", "build"], **kwargs)


def phase_script():
    """Each agent calls a tool on each turn, then speaks; the coach's second turn of a
    phase closes it. The coder's call comes in many chunks, with a second call."""
    turns = {"coach": 0, "coder": 0, "reviewer": 0}

    def reply(request):
        agent = request.agent
        if request.answers_tools:
            return Completion(f"{agent} read the results.")
        turns[agent] += 1
        if agent == "coach":
            if turns[agent] % 2 == 0:
                return Completion(
                    "", tool_calls=[ToolCall("signal_phase_complete", '{"summary": "Agreed."}')]
                )
            return Completion("Let me see.", tool_calls=[ToolCall("peer_discovery", "{}")])
        if agent == "coder":
            arguments = json.dumps({"trajectory": "Ship the parser, test first, " * 5})
            return Completion(
                "Two things.",
                tool_calls=[
                    ToolCall("declare_intent", arguments, id="call_intent"),
                    ToolCall("peer_discovery", '{"role": "reviewer"}', id="call_peers"),
                ],
                arguments_chunks=9,
            )
        return Completion("", tool_calls=[ToolCall("peer_discovery", "{}")])

    return reply


def run_to_done(team, limit=40):
    drain(team, limit=limit)
    team.refresh_from_db()
    return team


def test_a_team_on_an_openai_style_endpoint_runs_to_done_with_tools_in_every_phase(openai_api):
    api = openai_api(phase_script())
    team = trio()
    team_actions.team_start(team=team)
    team = run_to_done(team)
    assert team.status == Team.Status.DONE, list(team.messages.values_list("content", flat=True))
    steps = TurnStep.objects.filter(turn__team=team, kind=TurnStep.Kind.TOOL)
    assert {s.turn.phase for s in steps} == {"design", "build"}
    assert {s.tool_name for s in steps} >= {"peer_discovery", "declare_intent"}
    coder = team.agents.get(name="coder")
    assert coder.trajectory == ("Ship the parser, test first, " * 5).strip()  # 9 chunks
    # The models asked were the endpoint's own names, streamed, with Loom's tools.
    models = {r.body["model"] for r in api.requests}
    assert models == {"gpt-coach", "gpt-coder", "gpt-review"}
    assert all(r.body["stream"] is True for r in api.requests)
    first = api.requests[0].body
    assert first["messages"][0]["role"] == "system"
    assert "signal_phase_complete" in {t["function"]["name"] for t in first["tools"]}
    # Both calls of one reply went back as one assistant message and two tool messages.
    answered = next(r for r in api.requests if r.agent == "coder" and r.answers_tools).body
    assistant = [m for m in answered["messages"] if m.get("tool_calls")][-1]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_intent", "call_peers"]
    tool_ids = [m["tool_call_id"] for m in answered["messages"] if m["role"] == "tool"]
    assert tool_ids[-2:] == ["call_intent", "call_peers"]
    assert Turn.objects.filter(team=team).exclude(status=Turn.Status.DONE).count() == 0


def test_arguments_that_are_not_json_are_an_error_result_and_the_turn_goes_on(openai_api):
    api = openai_api(
        [
            Completion("", tool_calls=[ToolCall("peer_discovery", '{"role": "rev')]),
            Completion("", tool_calls=[ToolCall("peer_discovery", "{}")]),
            Completion("Found them."),
        ]
    )
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.DONE and len(api.requests) == 3
    error = [m for m in api.requests[1].body["messages"] if m["role"] == "tool"][-1]["content"]
    assert error.startswith("Error: the arguments of your peer_discovery call were not used:")
    assert "not valid JSON" in error and '{"role": "rev' in error
    ok = [m for m in api.requests[2].body["messages"] if m["role"] == "tool"][-1]["content"]
    assert not ok.startswith("Error")


def test_a_429_is_retried_by_the_sdk(openai_api):
    api = openai_api([Error(429, "slow down"), Completion("After a pause.")])
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.DONE and len(api.requests) == 2
    assert Message.objects.filter(content="After a pause.").exists()


@pytest.mark.parametrize(
    "failure, said",
    [
        (Error(401, "Incorrect API key provided"), "returned HTTP 401 (Incorrect API key"),
        (Error(404, "The model `gpt-coach` does not exist"), "returned HTTP 404 (The model"),
        (Error(500, "boom"), "returned HTTP 500 (boom)"),
    ],
)
def test_a_failed_call_fails_the_turn_and_pauses_the_team_saying_why(openai_api, failure, said):
    openai_api(lambda request: failure)
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    team.refresh_from_db()
    assert turn.status == Turn.Status.FAILED and team.status == Team.Status.PAUSED
    assert f"The endpoint 'fake' {said}" in turn.error
    note = Message.objects.filter(kind="system").last().content
    assert note.startswith("The turn of coach failed: The endpoint 'fake' " + said.split(" (")[0])


def test_a_truncated_tool_call_is_a_model_error(openai_api):
    openai_api(
        [Completion("", tool_calls=[ToolCall("peer_discovery", '{"ro')], finish_reason="length")]
    )
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.FAILED
    assert "cut off in the middle of a tool call" in turn.error


def test_cached_prompt_tokens_are_counted_at_the_cached_price(openai_api):
    openai_api(
        [Completion("Cached.", prompt_tokens=10_000, completion_tokens=1_000, cached_tokens=8_000)]
    )
    row = price_model("fake/gpt-coach", input_usd="2", output_usd="8")
    row.cache_read_usd = Decimal("0.5")
    row.save()
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert (turn.input_tokens, turn.cache_read_tokens, turn.output_tokens) == (2_000, 8_000, 1_000)
    # 2,000 x $2 + 8,000 x $0.5 + 1,000 x $8, per million.
    assert turn.cost_usd == Decimal("0.016000")
    team.refresh_from_db()
    assert team.spent_usd == Decimal("0.016000")


def test_a_local_endpoints_model_without_a_price_is_free(openai_api):
    openai_api([Completion("Free.", prompt_tokens=50_000, completion_tokens=5_000)])
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.DONE and turn.cost_usd == 0 and turn.input_tokens == 50_000


def test_a_hosted_endpoint_at_a_loopback_address_is_refused_by_the_outbound_guard(openai_api):
    api = openai_api([Completion("Never.")], local=False)
    price_model("fake/gpt-coach")
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.FAILED and api.requests == []
    assert turn.error == (
        "The endpoint 'fake' is not called: its base URL is refused: 127.0.0.1 is a loopback "
        "address (this host). A superuser marks it local if it is a server of this network."
    )


def test_a_hosted_endpoints_model_without_a_price_is_never_called(openai_api, loopback_allowed):
    api = openai_api([Completion("Never.")], local=False)
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.FAILED and api.requests == []
    assert "No price is known for the model 'fake/gpt-coach'" in turn.error


def test_the_pre_call_budget_check_refuses_a_call_over_budget(openai_api):
    api = openai_api([Completion("Too dear.")])
    price_model("fake/gpt-coach", input_usd="500", output_usd="2000")
    team = trio(max_cost_usd=Decimal("0.01"))
    team_actions.team_start(team=team)
    drain(team, limit=1)
    team.refresh_from_db()
    assert api.requests == [] and team.status == Team.Status.PAUSED
    request = PMRequest.objects.get(team=team)
    assert request.kind == PMRequest.Kind.BUDGET


def test_a_plain_call_reads_several_tool_calls(openai_api):
    openai_api(
        [
            Completion(
                "Both.",
                tool_calls=[ToolCall("a", '{"x": 1}', id="c1"), ToolCall("b", "{}", id="c2")],
                cached_tokens=20,
            )
        ]
    )
    reply = provider_for("fake/gpt-plain").respond(
        model="fake/gpt-plain",
        system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": "Go."}],
        tools=[{"name": "a", "description": "A.", "input_schema": {"type": "object"}}],
    )
    assert reply.content == [
        {"type": "text", "text": "Both."},
        {"type": "tool_use", "id": "c1", "name": "a", "input": {"x": 1}},
        {"type": "tool_use", "id": "c2", "name": "b", "input": {}},
    ]
    assert (reply.stop_reason, reply.model) == ("tool_use", "fake/gpt-plain")
    assert (reply.usage.input_tokens, reply.usage.cache_read_tokens) == (100, 20)


def test_a_key_variable_unset_is_said_before_any_request(openai_api, monkeypatch):
    monkeypatch.delenv("FAKE_API_KEY", raising=False)
    api = openai_api([Completion("Never.")], key_env="FAKE_API_KEY")
    with pytest.raises(ModelError, match="the variable FAKE_API_KEY is not set"):
        provider_for("fake/gpt-coach")
    monkeypatch.setenv("FAKE_API_KEY", "sk-fake-123")
    provider_for("fake/gpt-coach").respond(
        model="fake/gpt-coach", system=[], messages=[{"role": "user", "content": "Hi"}], tools=[]
    )
    headers = {name.lower(): value for name, value in api.requests[0].headers.items()}
    assert headers["authorization"] == "Bearer sk-fake-123"


def test_a_replay_of_the_run_asks_the_fake_nothing(openai_api):
    api = openai_api(phase_script())
    team = trio()
    team_actions.team_start(team=team)
    team = run_to_done(team)
    assert team.status == Team.Status.DONE
    asked = len(api.requests)
    row = replay.team_replay(team=team)
    assert len(api.requests) == asked
    assert row.status == Replay.Status.MATCHED, row.reason + "\n" + row.diff
    row.team.refresh_from_db()
    assert row.team.status == Team.Status.DONE and row.team.spent_usd == 0


SYSTEM = [{"type": "text", "text": "Your name is coder."}, {"type": "text", "text": "Be brief."}]
HISTORY = [
    {"role": "user", "content": "Go."},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "c1", "name": "a", "input": {"x": "é", "n": [1.5]}},
            {"type": "tool_use", "id": "c2", "name": "b", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "one"},
            {"type": "tool_result", "tool_use_id": "c2", "content": [{"type": "text", "text": ""}]},
            {"type": "text", "text": "And?", "cache_control": {"type": "ephemeral"}},
        ],
    },
]
TOOLS = [{"name": "a", "description": "A.", "input_schema": {"type": "object"}}]


def test_the_request_goes_as_loom_built_it_the_sdks_walk_spared(openai_api):
    """The messages and tools skip create()'s transform (extra_body): the body sent is
    the translation itself, and is what the SDK's transform would have made of it
    (if an SDK release starts renaming or formatting a message field, this fails)."""
    from openai._utils._transform import maybe_transform
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

    api = openai_api([Completion("Done.")])
    streamed = []
    provider_for("fake/gpt-coder").respond(
        model="fake/gpt-coder",
        system=SYSTEM,
        messages=HISTORY,
        tools=TOOLS,
        on_text=streamed.append,
    )
    assert "".join(streamed) == "Done."
    sent = api.requests[0].body
    named = {
        "model": "gpt-coder",
        "messages": chat_messages(SYSTEM, HISTORY),
        "tools": [chat_tool(t) for t in TOOLS],
        "max_tokens": sent["max_tokens"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert sent == named == maybe_transform(named, CompletionCreateParamsStreaming)
    assert [m["role"] for m in sent["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
    ]


def ask(model="fake/gpt-coder"):
    provider = provider_for(model)
    provider.respond(model=model, system=[], messages=[{"role": "user", "content": "Hi"}], tools=[])
    return provider.client


def test_one_client_per_endpoint_made_again_when_its_key_or_address_changes(
    openai_api, monkeypatch
):
    monkeypatch.setenv("FAKE_API_KEY", "sk-first")
    first = openai_api(lambda request: Completion("One."), key_env="FAKE_API_KEY")
    client = ask()
    assert ask() is client and ask("fake/gpt-other") is client  # kept across calls
    monkeypatch.setenv("FAKE_API_KEY", "sk-second")
    assert ask() is not client
    keys = [{k.lower(): v for k, v in r.headers.items()}["authorization"] for r in first.requests]
    assert keys == ["Bearer sk-first"] * 3 + ["Bearer sk-second"]
    # A superuser moves the endpoint: the next call goes to the new address.
    second = openai_api(lambda request: Completion("Two."), name="moved")
    row = ModelEndpoint.objects.get(name="fake")
    row.base_url = second.url
    row.save()
    ask()
    assert len(first.requests) == 4 and len(second.requests) == 1


def test_an_error_event_in_the_middle_of_a_stream_fails_the_turn_saying_so(openai_api):
    openai_api([Completion("Half a rep", stream_error="The server had an error")])
    team = trio()
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.FAILED
    assert turn.error == "The endpoint 'fake' failed: The server had an error"


def test_streamed_calls_without_an_index_are_taken_in_order():
    reply, heard = _Reply(), []
    calls = [
        {"id": "c1", "function": {"name": "a", "arguments": '{"x": 1}'}},
        {"id": "c2", "function": {"name": "b", "arguments": "{}"}},
    ]
    _read_choice(reply, {"delta": {"content": "Both.", "tool_calls": calls}}, heard.append)
    _read_choice(reply, {"delta": {}, "finish_reason": "tool_calls"}, heard.append)
    content = reply.as_model_reply("fake/m").content
    assert heard == ["Both."] and [b.get("id") for b in content] == [None, "c1", "c2"]
