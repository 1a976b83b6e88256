"""Traces in the GenAI semantic conventions (teams.observability.telemetry), through the real
anthropic client and the fake Messages API, into the SDK's in-memory exporter."""

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from teams.conversation import pm_requests
from teams.lib.catalog import CLAUDE_MAX_TOKENS
from teams.models import ConsultantProfile, PMRequest, Turn
from teams.observability import telemetry
from teams.run import team_actions
from tests.fakes.messages_api import FakeMessagesAPI, bad_request, overloaded, text, tool
from tests.helpers import drain, per_agent, stop_at_approval
from tests.live_site import ROOT, child_env
from tests.tools.test_consult import peer_output

# Fake vendor APIs and consultants listen on loopback, which the outbound guard allows here.
pytestmark = pytest.mark.usefixtures("loopback_allowed")

PROMPT = "How should the parser report errors?"


@pytest.fixture
def spans(monkeypatch):
    """Tracing on, into memory; `spans(capture=True)` records message content too."""
    from django.core.cache import cache

    exporters = []

    def start(capture=False):
        monkeypatch.setenv(telemetry.CAPTURE_CONTENT, "true" if capture else "")
        exporter = InMemorySpanExporter()
        telemetry.install(exporter, batch=False)
        exporters.append(exporter)
        return exporter

    cache.clear()  # the turns' remembered trace contexts of earlier tests
    yield start
    telemetry.shutdown()
    cache.clear()


def by_name(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def one(exporter, name):
    found = by_name(exporter, name)
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


@pytest.fixture
def consultant(monkeypatch):
    """A Claude consultant of team alpha, on a fake Messages API of its own."""
    server = FakeMessagesAPI(
        [
            tool(
                "peer_output",
                peer_output(),
                "toolu_out",
                input_tokens=900,
                output_tokens=300,
            )
        ]
    ).__enter__()
    monkeypatch.setenv("TEST_CLAUDE_API_KEY", "sk-ant-consultant")
    profile = ConsultantProfile.objects.create(
        name="critic",
        provider="anthropic",
        model="claude-haiku-4-5",
        base_url=server.url,
        key_env="TEST_CLAUDE_API_KEY",
        strengths="correctness",
    )
    yield profile
    server.__exit__(None, None, None)


def consulting_turn(team, messages_api, consultant):
    team.consultants.add(consultant)
    messages_api(
        per_agent(
            {
                "coach": [
                    tool(
                        "ask_peer",
                        {"peer": "critic", "prompt": PROMPT},
                        "toolu_peer",
                        say="Let me ask.",
                        input_tokens=120,
                        output_tokens=30,
                        cache_read_input_tokens=1000,
                        cache_creation_input_tokens=50,
                    ),
                    text("Done: a state machine it is."),
                ]
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    return Turn.objects.get(number=1)


def test_a_turn_is_a_tree_of_agent_model_and_tool_spans(
    spans, team, messages_api, consultant, agents
):
    exporter = spans()
    turn = consulting_turn(team, messages_api, consultant)
    assert turn.status == "done", turn.error
    agent = one(exporter, "invoke_agent coach")
    assert agent.kind == SpanKind.INTERNAL and agent.parent is None
    assert dict(agent.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "coach",
        "gen_ai.agent.id": str(agents["coach"].id),
        "gen_ai.request.model": turn.model,
        "loom.team": "alpha",
        "loom.team.id": team.id,
        "loom.turn.id": turn.id,
        "loom.turn.number": 1,
        "loom.turn.purpose": "conversation",
        "loom.phase": turn.phase,
        "loom.turn.attempt": 1,
        "loom.turn.outcome": "message",
        "loom.turn.status": "done",
    }
    assert agent.status.status_code == StatusCode.UNSET
    assert agent.resource.attributes["service.name"] == "loom"

    model = turn.model
    chats = by_name(exporter, f"chat {model}")
    assert len(chats) == 2  # the tool call's turn, and the answer after it
    first = min(chats, key=lambda s: s.start_time)
    assert first.kind == SpanKind.CLIENT and first.parent.span_id == agent.context.span_id
    assert dict(first.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": CLAUDE_MAX_TOKENS,
        "loom.model_call.purpose": "turn",
        "gen_ai.response.model": model,
        "gen_ai.response.finish_reasons": ("tool_use",),
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cache_read.input_tokens": 1000,
        "gen_ai.usage.cache_creation.input_tokens": 50,
        "loom.cost_usd": pytest.approx(first.attributes["loom.cost_usd"]),
    }
    assert first.attributes["loom.cost_usd"] > 0
    # The SDK's HTTP attempt is the call's child.
    posts = [s for s in by_name(exporter, "POST") if s.parent.span_id == first.context.span_id]
    assert len(posts) == 1 and posts[0].attributes["http.response.status_code"] == 200

    tool_span = one(exporter, "execute_tool ask_peer")
    assert tool_span.parent.span_id == agent.context.span_id
    assert tool_span.start_time > first.end_time
    assert {k: v for k, v in tool_span.attributes.items() if k != "gen_ai.tool.description"} == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "ask_peer",
        "gen_ai.tool.call.id": "toolu_peer",
        "gen_ai.tool.type": "function",
    }
    assert tool_span.status.status_code == StatusCode.UNSET

    consultation = one(exporter, "chat claude-haiku-4-5")
    assert consultation.parent.span_id == tool_span.context.span_id
    assert consultation.attributes["gen_ai.provider.name"] == "anthropic"
    assert consultation.attributes["loom.model_call.purpose"] == "consultation"
    assert consultation.attributes["loom.consultant"] == "critic"
    assert consultation.attributes["gen_ai.usage.input_tokens"] == 900
    assert consultation.attributes["gen_ai.usage.output_tokens"] == 300
    assert consultation.attributes["gen_ai.request.max_tokens"] == 2000
    # Every span of the turn is in one trace.
    traces = {s.context.trace_id for s in exporter.get_finished_spans()}
    assert traces == {agent.context.trace_id}


def test_no_content_and_no_secret_by_default(spans, team, messages_api, consultant):
    exporter = spans()
    consulting_turn(team, messages_api, consultant)
    everything = repr([dict(s.attributes) for s in exporter.get_finished_spans()])
    content = (
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    )
    for name in content:
        assert f"'{name}'" not in everything
    assert PROMPT not in everything and "state machine" not in everything
    assert "sk-test-key" not in everything and "sk-ant-consultant" not in everything


def test_content_is_recorded_when_asked(spans, team, messages_api, consultant):
    exporter = spans(capture=True)
    turn = consulting_turn(team, messages_api, consultant)
    chat = min(by_name(exporter, f"chat {turn.model}"), key=lambda s: s.start_time)
    assert "You are coach" in chat.attributes["gen_ai.system_instructions"] or (
        "coach" in chat.attributes["gen_ai.system_instructions"]
    )
    assert '"role": "user"' in chat.attributes["gen_ai.input.messages"]
    assert (
        '"type": "tool_call", "id": "toolu_peer", "name": "ask_peer"'
        in (chat.attributes["gen_ai.output.messages"])
    )
    tool_span = one(exporter, "execute_tool ask_peer")
    assert PROMPT in tool_span.attributes["gen_ai.tool.call.arguments"]
    assert "Use a state machine" in tool_span.attributes["gen_ai.tool.call.result"]
    consultation = one(exporter, "chat claude-haiku-4-5")
    assert PROMPT in consultation.attributes["gen_ai.input.messages"]
    assert "Use a state machine" in consultation.attributes["gen_ai.output.messages"]
    everything = repr([dict(s.attributes) for s in exporter.get_finished_spans()])
    assert "sk-test-key" not in everything and "sk-ant-consultant" not in everything


def test_a_failing_call_is_an_error_and_retries_show(spans, team, messages_api):
    exporter = spans()
    messages_api([overloaded(), bad_request("messages: too long")])
    team_actions.team_start(team=team)
    drain(team, limit=1)
    turn = Turn.objects.get()
    assert turn.status == "failed"
    chat = one(exporter, f"chat {turn.model}")
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes["error.type"] == "400"
    assert chat.attributes["loom.retries"] == 1
    attempts = sorted(by_name(exporter, "POST"), key=lambda s: s.start_time)
    assert [a.attributes["http.response.status_code"] for a in attempts] == [529, 400]
    assert attempts[1].attributes["http.request.resend_count"] == 1
    assert all(a.parent.span_id == chat.context.span_id for a in attempts)
    agent = one(exporter, "invoke_agent coach")
    assert agent.status.status_code == StatusCode.ERROR
    assert agent.attributes["error.type"] == "turn_failed"
    assert agent.attributes["loom.turn.outcome"] == "error"


def test_a_failing_tool_call_is_an_error(spans, team, messages_api):
    exporter = spans()
    messages_api([tool("read_consultation", {"consultation_id": 999}, "toolu_bad"), text("ok")])
    team_actions.team_start(team=team)
    drain(team, limit=1)
    span = one(exporter, "execute_tool read_consultation")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["error.type"] == "tool_error"
    # Content capture is off: the status says nothing of the result (issue 33, finding 6).
    assert not span.status.description


def test_a_failing_tool_calls_result_is_in_its_status_only_with_content_capture(
    spans, team, messages_api
):
    exporter = spans(capture=True)
    messages_api([tool("read_consultation", {"consultation_id": 999}, "toolu_bad"), text("ok")])
    team_actions.team_start(team=team)
    drain(team, limit=1)
    span = one(exporter, "execute_tool read_consultation")
    assert span.status.description.startswith("Error: ")


def test_ask_pm_then_answer_then_the_next_turn_links_to_the_asking_one(spans, team, messages_api):
    exporter = spans()
    messages_api(
        per_agent(
            {
                "coach": [tool("ask_pm", {"question": "HTML or PDF?"}, "toolu_ask")],
                "researcher": [text("HTML it is.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    asking = one(exporter, "invoke_agent coach")
    assert asking.attributes["loom.turn.outcome"] == "pm_request"
    assert one(exporter, "execute_tool ask_pm").attributes["loom.tool.ends_turn"] == "pm_request"
    request = PMRequest.objects.get()
    pm_requests.pm_request_answer(request_id=request.id, answer="HTML only.")
    drain(team, limit=1)
    request.refresh_from_db()
    resumed = one(exporter, "invoke_agent researcher")
    waited = (request.answered_at - request.created_at).total_seconds()
    assert resumed.attributes["loom.pm_request.id"] == request.id
    assert resumed.attributes["loom.pm_request.kind"] == "question"
    assert resumed.attributes["loom.pm_request.wait_seconds"] == pytest.approx(waited, abs=0.01)
    (link,) = resumed.links
    assert (link.context.trace_id, link.context.span_id) == (
        asking.context.trace_id,
        asking.context.span_id,
    )
    assert link.attributes["loom.pm_request.id"] == request.id
    # The turn that did not follow an answer carries none of it.
    assert "loom.pm_request.id" not in asking.attributes and not asking.links


def test_an_approval_resumes_the_same_turn_linked_to_the_attempt_that_asked(
    spans, team, messages_api
):
    exporter = spans()
    stop_at_approval(team, messages_api)
    asking = one(exporter, "invoke_agent coder")
    assert asking.attributes["loom.turn.outcome"] == "waiting"
    request = PMRequest.objects.get(kind=PMRequest.Kind.APPROVAL)
    pm_requests.pm_request_answer(request_id=request.id, answer="Approve")
    drain(team, limit=1)
    attempts = sorted(by_name(exporter, "invoke_agent coder"), key=lambda s: s.start_time)
    assert len(attempts) == 2
    resumed = attempts[1]
    assert resumed.attributes["loom.turn.attempt"] == 2
    assert resumed.attributes["loom.turn.id"] == asking.attributes["loom.turn.id"]
    assert resumed.attributes["loom.pm_request.id"] == request.id
    assert resumed.attributes["loom.pm_request.kind"] == "approval"
    assert resumed.attributes["loom.pm_request.wait_seconds"] >= 0
    assert [(lk.context.span_id, lk.attributes["loom.pm_request.id"]) for lk in resumed.links] == [
        (asking.context.span_id, request.id)
    ]
    # The same trace: a root turn's later attempt keeps its first one's trace id.
    assert resumed.context.trace_id == asking.context.trace_id
    # The approved call runs in the resumed attempt.
    (peer,) = by_name(exporter, "execute_tool peer_message")
    assert peer.parent.span_id == resumed.context.span_id


def test_a_traceparent_parents_the_turns_a_request_starts(spans, team, messages_api, pm):
    from tests.helpers import client_for

    exporter = spans()
    messages_api(per_agent({"coach": [text("Hello.")], "researcher": [text("Hi.")]}))
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    response = client_for(pm).post(
        f"/api/teams/{team.slug}/start",
        content_type="application/json",
        headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
    )
    assert response.status_code == 200, response.content
    drain(team, limit=2)
    agents = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert len(agents) == 2
    for span in agents:  # the first turn, and the one the worker queued after it
        assert format(span.context.trace_id, "032x") == trace_id
        assert format(span.parent.span_id, "016x") == parent_id


def test_a_crashed_attempt_is_followed_by_a_new_span_in_the_same_trace(spans, team, messages_api):
    from teams.run import turns

    exporter = spans()
    messages_api([text("Hello.")])
    team_actions.team_start(team=team)
    turn = Turn.objects.get()
    claimed = turns.turn_claim(turn.id, "dead-worker")
    with telemetry.turn_span(claimed):
        pass  # the worker died here: its lease runs out
    Turn.objects.filter(pk=turn.pk).update(lease_expires_at=None)
    Turn.objects.filter(pk=turn.pk).update(status="queued", claimed_by="")
    drain(team, limit=1)
    first, second = sorted(by_name(exporter, "invoke_agent coach"), key=lambda s: s.start_time)
    assert second.attributes["loom.turn.attempt"] == 2
    assert second.context.trace_id == first.context.trace_id
    assert [lk.context.span_id for lk in second.links] == [first.context.span_id]


def test_the_mcp_hook_is_a_client_span_under_the_tool(spans):
    exporter = spans()

    class Server:
        name, transport, env_vars = "files", "stdio", {"TOKEN": "s3cret-value"}

    with telemetry.tool_call({"name": "files__read", "id": "toolu_1"}) as call:
        with telemetry.mcp_call(Server(), "read"):
            pass
        assert call.span is not None
    span = one(exporter, "tools/call read")
    assert span.kind == SpanKind.CLIENT
    assert dict(span.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "read",
        "loom.mcp.server": "files",
        "loom.mcp.transport": "stdio",
    }
    assert span.parent.span_id == one(exporter, "execute_tool files__read").context.span_id


def test_without_an_endpoint_no_exporter_no_thread_no_sdk(db):
    """A process with no OTEL endpoint: configure() is false and imports nothing."""
    script = (
        "import sys, threading, django; django.setup();"
        "from teams.observability import telemetry;"
        "from teams.engine import loop;"
        "print(telemetry.enabled(), 'opentelemetry.sdk' in sys.modules,"
        " 'opentelemetry.exporter.otlp.proto.http' in sys.modules,"
        " [t.name for t in threading.enumerate() if 'Otel' in t.name])"
    )
    env = {k: v for k, v in child_env().items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.stdout.strip() == "False False False []", done.stderr
    # And with an endpoint it is on, batching in the SDK's thread.
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.stdout.strip() == "True True True ['OtelBatchSpanRecordProcessor']", done.stderr


def test_other_protocols_and_a_disabled_sdk_stay_off(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert telemetry.configure() is False
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert telemetry.configure() is False and not telemetry.enabled()


@pytest.mark.django_db(transaction=True)
def test_the_trace_context_of_a_wake_up_whose_claim_fails_is_not_kept(spans, team):
    """Duplicate wake-ups of a turn run elsewhere: none of their carriers stays behind."""
    from teams.engine import worker

    spans()
    team_actions.team_start(team=team)
    turn = Turn.objects.get()
    Turn.objects.filter(pk=turn.pk).update(status="done")  # another worker ran it
    carrier = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    for _ in range(3):
        telemetry.wake_received({"type": "turn.queued", "turn_id": turn.id, "trace": carrier})
        assert telemetry.wakes_kept() == 1
        worker.run_claimed_turn(turn.id)
    assert telemetry.wakes_kept() == 0


def test_a_webhook_delivery_is_a_post_span_whose_traceparent_the_receiver_gets(spans, team):
    from datetime import timedelta

    from django.utils import timezone

    from teams.engine import deliveries
    from teams.integrations import webhooks
    from tests.fakes.webhook_receiver import Answer, WebhookReceiver

    exporter = spans()
    with WebhookReceiver([Answer(503), Answer(200)]) as hook:
        _, hook.secret = webhooks.webhook_create(
            team=team, url=hook.url + "/loom", events=["pm_request.opened"]
        )
        coach = team.agents.get(name="coach")
        pm_requests.pm_request_open(team=team, agent=coach, question="HTML or PDF?")
        assert deliveries.deliver_due()["retrying"] == 1
        later = timezone.now() + timedelta(hours=1)
        assert deliveries.deliver_due(now=later)["delivered"] == 1
    refused, delivered = sorted(by_name(exporter, "POST"), key=lambda s: s.start_time)
    assert refused.attributes["http.response.status_code"] == 503
    assert refused.attributes["loom.webhook.outcome"] == "refused"
    assert refused.status.status_code.name == "ERROR"
    assert delivered.attributes["loom.webhook.outcome"] == "delivered"
    assert delivered.attributes["loom.webhook.attempt"] == 2
    for got, span in zip(hook.requests, (refused, delivered), strict=True):
        ids = format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")
        assert got.headers["traceparent"].split("-")[1:3] == list(ids)
