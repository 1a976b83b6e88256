"""Consultations: PeerOutput, ask_peer, ask_multi and read_consultation through the
real anthropic and openai SDKs against local fakes of their APIs; the consultants a
team enabled, in the tools' schema; every answer whole in the result; every
consultant's call checked against the budgets before it is sent."""

import json
import re
import threading
from datetime import UTC, datetime

import pytest

from teams.errors import InvalidInput
from teams.integrations.consultations import PeerOutput, parse_peer_output, strict_schema
from teams.models import ConsultantProfile, Consultation, Message, Team, Turn
from teams.run import team_actions
from tests.fakes.messages_api import FakeMessagesAPI, Reply, text, tool
from tests.fakes.openai_api import Completion, FakeOpenAI
from tests.helpers import drain, per_agent, price_model
from tests.tools import test_workspace
from tests.tools.test_workspace import CANARY, HOSTILE_PATHS
from tools import registry

# The fake vendor APIs listen on loopback: the outbound guard is told to allow it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


def peer_output(**changes) -> dict:
    data = {
        "responder": "critic",
        "timestamp": "2026-11-23T10:00:00+00:00",
        "answer": "Use a state machine for the parser.",
        "confidence": 0.8,
        "key_points": ["States are explicit", "Errors carry positions"],
        "suggested_actions": [
            {"action": "Write the tokenizer", "priority": "high", "rationale": "Everything uses it"}
        ],
        "file_references": [],
    }
    return {**data, **changes}


# --- the schema ----------------------------------------------------------------------


class TestPeerOutput:
    def test_valid(self):
        output = parse_peer_output(
            peer_output(alternatives=None, execution_notes="ok"), responder="critic"
        )
        assert output.confidence == 0.8 and output.suggested_actions[0].priority == "high"

    def test_missing_fields(self):
        data = peer_output()
        del data["answer"], data["key_points"]
        with pytest.raises(InvalidInput, match="answer: Field required; key_points: Field req"):
            parse_peer_output(data, responder="critic")

    def test_confidence_out_of_range(self):
        with pytest.raises(InvalidInput, match="confidence: Input should be less than or equal"):
            parse_peer_output(peer_output(confidence=1.5), responder="critic")

    def test_extra_keys(self):
        with pytest.raises(InvalidInput, match="mood: Extra inputs are not permitted"):
            parse_peer_output(peer_output(mood="great"), responder="critic")

    def test_not_an_object(self):
        with pytest.raises(InvalidInput, match="not a JSON object"):
            parse_peer_output(["answer"], responder="critic")

    def test_strict_schema_requires_every_property_everywhere(self):
        def objects(node):
            if isinstance(node, dict):
                if node.get("type") == "object" and "properties" in node:
                    yield node
                for value in node.values():
                    yield from objects(value)
            elif isinstance(node, list):
                for value in node:
                    yield from objects(value)

        found = list(objects(strict_schema()))
        assert len(found) >= 5
        for node in found:
            assert set(node["required"]) == set(node["properties"])
            assert node["additionalProperties"] is False
        # The responder and the timestamp are Loom's to set, not the consultant's.
        assert set(strict_schema()["properties"]) == set(PeerOutput.model_fields) - {
            "responder",
            "timestamp",
        }


# --- the profiles, against fakes of their vendors -------------------------------------


def serving(fake_class):
    """A fixture starting fake servers of `fake_class` with a script, stopped after."""

    @pytest.fixture
    def start_servers():
        servers = []

        def start(script):
            server = fake_class(script).__enter__()
            servers.append(server)
            return server

        yield start
        for server in servers:
            server.__exit__(None, None, None)

    return start_servers


anthropic_fake = serving(FakeMessagesAPI)
openai_fake = serving(FakeOpenAI)


def enabled(profile, slug="alpha"):
    """The profile, enabled for the team (alpha): agents ask only their team's."""
    Team.objects.get(slug=slug).consultants.add(profile)
    return profile


def claude_profile(url, name="critic", strengths="correctness, logic, edge cases"):
    return enabled(
        ConsultantProfile.objects.create(
            name=name,
            provider="anthropic",
            model="claude-haiku-4-5",
            base_url=url,
            key_env="TEST_CLAUDE_API_KEY",
            strengths=strengths,
        )
    )


def gpt_profile(url, name="architect", strengths="architecture, patterns, scalability"):
    price_model("gpt-4.1-mini")  # not in the default table: Loom calls no unpriced model
    return enabled(
        ConsultantProfile.objects.create(
            name=name,
            provider="openai",
            model="gpt-4.1-mini",
            base_url=url,
            key_env="TEST_OPENAI_API_KEY",
            strengths=strengths,
        )
    )


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("TEST_CLAUDE_API_KEY", "sk-ant-test")
    monkeypatch.setenv("TEST_OPENAI_API_KEY", "sk-openai-test")


def call(ctx, name, **arguments):
    return registry.execute(name, arguments, ctx)


def test_ask_peer_on_claude_forces_the_peer_output_tool(ctx_for, anthropic_fake, team):
    server = anthropic_fake(
        [tool("peer_output", peer_output(), input_tokens=900, output_tokens=300)]
    )
    claude_profile(server.url)
    result = call(
        ctx_for("coder"),
        "ask_peer",
        peer="critic",
        prompt="How should the parser report errors?",
        task_type="plan",
        focus_areas=["correctness"],
        context="Errors today are bare strings.",
    )
    assert not result.is_error
    record = Consultation.objects.get()
    assert result.text.startswith(
        f"## critic (claude-haiku-4-5), consultation {record.pk}\nConfidence: 0.80\n"
    )
    assert result.text.endswith(
        f"(Consultation {record.pk}: read it in full with read_consultation({record.pk}).)"
    )
    assert "- [high] Write the tokenizer: Everything uses it" in result.text
    sent = server.requests[0]
    assert sent.body["tool_choice"] == {"type": "tool", "name": "peer_output"}
    assert sent.body["tools"][0]["input_schema"]["required"]
    headers = {k.lower(): v for k, v in sent.headers.items()}
    # anthropic 2.x sends the key as a Bearer token; older SDKs as x-api-key.
    assert "Bearer sk-ant-test" == headers.get("authorization") or (
        headers.get("x-api-key") == "sk-ant-test"
    )
    assert sent.body["system"].startswith("You are a peer engineer. Your strengths: correctness")
    prompt = sent.body["messages"][0]["content"]
    assert (
        "coder (coder) of team Alpha is asking for your help with: How should the parser" in prompt
    )
    assert "Task type: plan." in prompt and "Errors today are bare strings." in prompt
    record = Consultation.objects.get()
    assert (record.status, record.input_tokens, record.output_tokens) == ("done", 900, 300)
    assert record.output["answer"] == "Use a state machine for the parser."
    assert record.cost_usd > 0 and record.duration_seconds is not None
    assert Team.objects.get(pk=team.pk).spent_usd == record.cost_usd  # no turn: the team's


def test_ask_peer_on_an_openai_compatible_server_uses_a_strict_schema(ctx_for, openai_fake):
    server = openai_fake([Completion(json.dumps(peer_output(responder="architect")))])
    gpt_profile(server.url)
    result = call(ctx_for("coder"), "ask_peer", peer="architect", prompt="Layering?")
    assert not result.is_error and result.text.startswith("## architect (gpt-4.1-mini), consul")
    body = server.requests[0].body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    headers = {k.lower(): v for k, v in server.requests[0].headers.items()}
    assert headers["authorization"] == "Bearer sk-openai-test"
    assert (
        body["messages"][0]
        == {
            "role": "system",
            "content": body["messages"][0]["content"],
        }
        and "architecture, patterns, scalability" in body["messages"][0]["content"]
    )
    assert Consultation.objects.get().status == "done"


def test_a_missing_key_is_said_and_nothing_is_sent(ctx_for, openai_fake, monkeypatch):
    server = openai_fake([Completion(json.dumps(peer_output()))])
    gpt_profile(server.url)
    monkeypatch.delenv("TEST_OPENAI_API_KEY")
    result = call(ctx_for("coder"), "ask_peer", peer="architect", prompt="Layering?")
    consultation = Consultation.objects.get()
    assert result.text.startswith(
        f"## architect (gpt-4.1-mini), consultation {consultation.id}\nError: Consultant "
        "architect cannot be asked: the key variable TEST_OPENAI_API_KEY is not set"
    )
    assert server.requests == []
    assert Consultation.objects.get().status == "failed"


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (Completion("this is not json"), "the reply was not JSON"),
        (Completion(json.dumps(peer_output(confidence=7))), "confidence: Input should be"),
        (Completion('{"responder": "x", "ans', finish_reason="length"), "cut off at 2000 tokens"),
    ],
)
def test_a_malformed_reply_is_a_clear_error_and_the_turn_finishes(
    team, agents, openai_fake, messages_api, reply, problem
):
    server = openai_fake([reply])
    gpt_profile(server.url)
    model = messages_api(
        per_agent(
            {
                "coach": [
                    tool("ask_peer", {"peer": "architect", "prompt": "Layering?"}, "toolu_peer"),
                    text("Noted."),
                ]
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    turn = Turn.objects.get(number=1)
    assert (turn.status, turn.outcome) == ("done", "message"), turn.error
    tool_result = model.requests[1].body["messages"][-1]["content"][0]
    assert tool_result["tool_use_id"] == "toolu_peer"
    assert "Error: The consultant's reply is unusable" in tool_result["content"] or (
        "does not fit PeerOutput" in tool_result["content"]
    )
    assert problem in tool_result["content"]
    record = Consultation.objects.get()
    assert record.status == "failed" and problem in record.error and record.turn == turn


def test_ask_multi_asks_in_parallel(ctx_for, anthropic_fake, openai_fake):
    # Each consultant's reply waits until both requests are in flight: asked one after
    # the other, the first would wait alone until the barrier gives up and breaks.
    both_asked = threading.Barrier(2, timeout=15)
    claude = anthropic_fake([Reply([_peer_tool()], stop_reason="tool_use", gate=both_asked.wait)])
    gpt = openai_fake(
        [Completion(json.dumps(peer_output(responder="architect")), gate=both_asked.wait)]
    )
    claude_profile(claude.url)
    gpt_profile(gpt.url)
    result = call(ctx_for("coder"), "ask_multi", prompt="Which parser design?")
    assert not both_asked.broken, "the consultants were not asked side by side"
    assert result.text.startswith("2 of 2 consultants answered.")
    assert result.text.index("## architect") < result.text.index("## critic")
    batches = set(Consultation.objects.values_list("batch", flat=True))
    assert len(batches) == 1 and Consultation.objects.filter(status="done").count() == 2


def test_ask_multi_names_unknown_peers(ctx_for, openai_fake):
    gpt_profile(openai_fake([]).url)
    result = call(ctx_for("coder"), "ask_multi", prompt="?", peers=["nobody"])
    assert result.text == (
        "Error: no enabled consultant named nobody. "
        "Consultants: architect (architecture, patterns, scalability)."
    )
    assert not Consultation.objects.exists()


def _peer_tool():
    return {"type": "tool_use", "id": "toolu_po", "name": "peer_output", "input": peer_output()}


# --- the workspace: relevant files in, file references checked on the way out ---------

hostile_fixture = test_workspace.hostile  # the furnished workspace, as the file tools get it


def test_relevant_files_are_sent_bounded_and_hostile_ones_are_not(
    ctx_for, team, openai_fake, hostile_fixture
):
    from teams.files import workspace

    root, canary = hostile_fixture
    (root / "big.py").write_text("x = 1\n" * 5_000)  # 30,000 characters
    server = openai_fake([Completion(json.dumps(peer_output()))])
    gpt_profile(server.url)
    hostile_paths = [path for path, _reason, _leaves in HOSTILE_PATHS][:8]
    result = call(
        ctx_for("coder"),
        "ask_peer",
        peer="architect",
        prompt="Review these.",
        relevant_files=["notes.txt", "big.py", *hostile_paths],
    )
    assert not result.is_error
    prompt = server.requests[0].body["messages"][1]["content"]
    assert "--- notes.txt ---\nnotes\n" in prompt
    assert "--- big.py ---" in prompt and "[... truncated: the first 12,000 characters" in prompt
    assert CANARY not in prompt and canary.read_text() == CANARY
    assert "Only the first 10 relevant files are included." not in prompt  # 10 given
    for path in hostile_paths[:7]:
        assert f"{path}: not included (" in prompt
    assert workspace.workspace_root(team) == root


def test_file_references_outside_or_missing_are_dropped_and_reported(
    ctx_for, team, openai_fake, hostile_fixture
):
    root, canary = hostile_fixture
    references = [{"path": "notes.txt", "lines": "1-2", "relevance": "the notes"}]
    references += [{"path": "missing.py", "relevance": "imagined"}]
    references += [{"path": path, "relevance": "hostile"} for path, _r, _l in HOSTILE_PATHS]
    server = openai_fake([Completion(json.dumps(peer_output(file_references=references)))])
    gpt_profile(server.url)
    result = call(ctx_for("coder"), "ask_peer", peer="architect", prompt="Where?")
    record = Consultation.objects.get()
    assert [r["path"] for r in record.output["file_references"]] == ["notes.txt"]
    dropped = {d["path"]: d["reason"] for d in record.flagged_files}

    def stored(path):  # the record keeps no NUL (PostgreSQL refuses it)
        return path.replace("\x00", "")

    assert set(dropped) == {"missing.py", *(stored(p) for p, _r, _l in HOSTILE_PATHS)}
    assert dropped["missing.py"] == "no such file in the workspace"
    for path, reason, _leaves in HOSTILE_PATHS:
        assert reason in dropped[stored(path)], (path, dropped[stored(path)])
    assert "Files: notes.txt:1-2" in result.text and "Dropped file references:" in result.text
    assert CANARY not in result.text and canary.read_text() == CANARY


# --- consultations whole: every answer reaches the model ------------------------------

LENSES = {"architect": "architecture", "critic": "correctness", "tester": "testing"}


def long_answer(name: str, chars: int = 8_000) -> str:
    """About 2,000 tokens of answer that say whose they are, first and last."""
    body = (f"{name} weighs the parser design against the goal. " * (chars // 40))[:chars]
    return f"<<{name} begins>> {body} <<{name} ends>>"


def peer_reply(data: dict, **usage) -> Reply:
    block = {"type": "tool_use", "id": "toolu_po", "name": "peer_output", "input": data}
    return Reply([block], stop_reason="tool_use", **usage)


def by_lens(request):
    """Each consultant answers at length, telling it from the others by its strengths."""
    system = request.body["system"]
    name = next(n for n, lens in LENSES.items() if f"Your strengths: {lens}." in system)
    return peer_reply(peer_output(answer=long_answer(name)), output_tokens=2000)


def test_three_consultants_with_2000_token_answers_all_reach_the_model(
    team, agents, anthropic_fake, messages_api
):
    server = anthropic_fake(by_lens)
    for name, lens in LENSES.items():
        claude_profile(server.url, name=name, strengths=lens)
    model = messages_api(
        per_agent(
            {
                "coach": [
                    tool("ask_multi", {"prompt": "Which parser design?"}, "toolu_multi"),
                    text("Noted."),
                ]
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert len(server.requests) == 3
    # The team's consultants, and what each is good for, are in the tool's schema.
    (ask_multi,) = [t for t in model.requests[0].body["tools"] if t["name"] == "ask_multi"]
    peers = ask_multi["input_schema"]["properties"]["peers"]
    assert (
        "architect (architecture); critic (correctness); tester (testing)" in (peers["description"])
    )
    (array,) = [option for option in peers["anyOf"] if option.get("type") == "array"]
    assert array["items"]["enum"] == ["architect", "critic", "tester"]
    # The result the model reads holds all three answers, whole.
    (result,) = model.requests[1].body["messages"][-1]["content"]
    assert result["tool_use_id"] == "toolu_multi"
    content = result["content"]
    ids = list(Consultation.objects.order_by("profile__name").values_list("pk", flat=True))
    assert content.startswith(
        f"3 of 3 consultants answered. Consultations {', '.join(map(str, ids))}: read one "
        "in full with read_consultation(consultation_id)."
    )
    for name in LENSES:
        assert long_answer(name) in content, name
    assert "truncated" not in content and len(content) <= 32_000
    digest = Message.objects.get(kind=Message.Kind.TOOL_CALL, author__name="coach").content
    assert digest == (
        f"You asked architect, critic and tester (consultations {', '.join(map(str, ids))}): "
        '"Which parser design?" (3 of 3 answered)'
    )


def test_a_long_answer_is_cut_with_a_marker_and_read_in_full(ctx_for, anthropic_fake):
    answer = long_answer("critic", chars=20_000)
    server = anthropic_fake([peer_reply(peer_output(answer=answer))])
    claude_profile(server.url)
    result = call(ctx_for("coder"), "ask_peer", peer="critic", prompt="Review the parser.")
    record = Consultation.objects.get()
    assert len(result.text) <= 16_000 and answer not in result.text
    assert "<<critic begins>>" in result.text
    assert re.search(
        r"\n\[Answer truncated: the first 15,\d{3} of 20,\d{3} characters; read it in full "
        rf"with read_consultation\({record.pk}\)\.\]\n\n\(Consultation {record.pk}: ",
        result.text,
    )
    assert result.digest == f'You asked critic (consultation {record.pk}): "Review the parser."'

    whole = call(ctx_for("reviewer"), "read_consultation", consultation_id=record.pk)
    assert not whole.is_error
    assert whole.text.startswith(f"## critic (claude-haiku-4-5), consultation {record.pk}\n")
    assert answer in whole.text
    assert "Asked by coder at " in whole.text and "(general): Review the parser." in whole.text
    assert "Answered by critic at " in whole.text
    assert whole.digest == f"You read consultation {record.pk} (critic) in full."


def test_read_consultation_reads_only_this_teams(ctx_for, other_team):
    theirs = Consultation.objects.create(team=other_team, prompt="Their secret plan?")
    for consultation_id in (theirs.pk, theirs.pk + 1000):
        result = call(ctx_for("coder"), "read_consultation", consultation_id=consultation_id)
        assert result.is_error
        assert result.text == f"Error: No consultation {consultation_id} in this team."
    assert "secret" not in result.text


def test_the_schema_names_the_teams_enabled_consultants(team, other_team):
    critic = enabled(ConsultantProfile.objects.create(name="critic", model="loom-offline"))
    critic.strengths = "correctness, logic, edge cases"
    critic.save()
    enabled(ConsultantProfile.objects.create(name="architect", model="loom-offline"))
    enabled(ConsultantProfile.objects.create(name="retired", model="loom-offline", enabled=False))
    enabled(ConsultantProfile.objects.create(name="outsider", model="loom-offline"), "beta")

    def schema(tool_name, team):
        (definition,) = registry.definitions([registry.get(tool_name)], team)
        return definition["input_schema"]["properties"]

    peer = schema("ask_peer", team)["peer"]
    assert peer["enum"] == ["architect", "critic"]
    assert peer["description"] == (
        "The consultant to ask. This team's consultants: architect (loom-offline); "
        "critic (correctness, logic, edge cases)"
    )
    assert schema("ask_peer", other_team)["peer"]["enum"] == ["outsider"]
    lonely = Team.objects.create(slug="gamma", name="Gamma")
    assert "enum" not in schema("ask_peer", lonely)["peer"]
    assert "None are enabled for this team" in schema("ask_multi", lonely)["peers"]["description"]
    # Without a team (the API's listing of every tool) the schema is the plain one.
    (plain,) = registry.definitions([registry.get("ask_peer")])
    assert "enum" not in plain["input_schema"]["properties"]["peer"]


def test_responder_and_timestamp_are_set_by_loom(ctx_for, anthropic_fake):
    invented = peer_output(responder="gpt-imposter", timestamp="1999-12-31T23:59:59+00:00")
    server = anthropic_fake([peer_reply(invented)])
    claude_profile(server.url)
    before = datetime.now(UTC).replace(microsecond=0)
    call(ctx_for("coder"), "ask_peer", peer="critic", prompt="Who are you?")
    output = Consultation.objects.get().output
    assert output["responder"] == "critic"
    assert datetime.fromisoformat(output["timestamp"]) >= before
    asked = server.requests[0].body["tools"][0]["input_schema"]
    assert "responder" not in asked["properties"] and "timestamp" not in asked["properties"]
    assert "responder" not in asked["required"]


def test_agents_ask_only_their_teams_consultants(ctx_for, anthropic_fake, other_team):
    server = anthropic_fake([peer_reply(peer_output())])
    claude_profile(server.url)
    outsider = ConsultantProfile.objects.create(
        name="outsider", provider="anthropic", model="claude-haiku-4-5", base_url=server.url
    )
    enabled(outsider, "beta")
    result = call(ctx_for("coder"), "ask_multi", prompt="Which parser design?")
    assert result.text.startswith("1 of 1 consultants answered.")
    assert len(server.requests) == 1
    refused = call(ctx_for("coder"), "ask_peer", peer="outsider", prompt="?")
    assert refused.text == (
        "Error: no enabled consultant named 'outsider'. "
        "Consultants: critic (correctness, logic, edge cases)."
    )
    assert len(server.requests) == 1
