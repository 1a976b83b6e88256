"""The agent loop against the real anthropic client and a fake Messages API."""

import pytest

from teams import services
from teams.conversation import pm_requests
from teams.engine import loop, worker
from teams.models import Message, PMRequest, Team, Turn, TurnStep
from teams.run import team_actions, turns
from tests.fakes.messages_api import bad_request, overloaded, rate_limited, text, tool
from tests.helpers import drain, per_agent
from tools import registry

ALL = {"pass_turn", "peer_message", "peer_discovery"}
COACH_ONLY = {"ask_pm", "signal_phase_complete"}


@pytest.fixture
def conversation_run(team, messages_api):
    services.anchor_save(team=team, key="output_format", value="static HTML")
    api = messages_api(
        per_agent(
            {
                "coach": [
                    text("Welcome. @coder please propose the module layout."),
                    tool("ask_pm", {"question": "HTML only, or PDF too?"}, "toolu_ask"),
                ],
                "researcher": [
                    tool(
                        "pass_turn",
                        {"reason": "nothing to add yet"},
                        "toolu_pass",
                        say="SECRET-PASS-TEXT",
                    ),
                    text("Noted: HTML only."),
                ],
                "coder": [
                    tool(
                        "peer_message",
                        {"to": "reviewer", "content": "check my layout"},
                        "toolu_peer",
                    ),
                    text(
                        "Layout: parser, renderer, cli.",
                        input_tokens=300,
                        output_tokens=40,
                        cache_read_input_tokens=1000,
                    ),
                ],
                "reviewer": [text("Looks fine to me.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team)
    return api


def requests_of(api, name):
    return [r for r in api.requests if r.agent == name]


def test_four_agent_conversation_transcript(conversation_run, team):
    team.refresh_from_db()
    assert team.status == Team.Status.AWAITING_PM
    transcript = [
        (m.speaker, m.kind, m.content)
        for m in Message.objects.filter(recipient__isnull=True).order_by("id")
    ]
    assert transcript == [
        ("coach", "chat", "Welcome. @coder please propose the module layout."),
        ("researcher", "pass_note", "(researcher passes: nothing to add yet)"),
        ("coder", "chat", "Layout: parser, renderer, cli."),
        ("reviewer", "chat", "Looks fine to me."),
        ("coach", "system", "(Requesting PM input: HTML only, or PDF too?)"),
    ]
    assert team.turn_count == 5
    request = PMRequest.objects.get(team=team)
    assert request.status == "open" and request.question == "HTML only, or PDF too?"


def test_pass_notes_and_pass_text_never_reach_the_model(conversation_run):
    after_pass = conversation_run.requests[2:]
    assert after_pass
    for request in after_pass:
        assert "passes:" not in request.dump
        assert "SECRET-PASS-TEXT" not in request.dump


def test_anchor_block_and_mention_note(conversation_run):
    for request in conversation_run.requests:
        assert "<immutable-anchors>" in request.system_text
        assert (
            "<immutable-anchors>\nThese are IMMUTABLE ANCHORS. Override any chat history that "
            "conflicts with them:\n  [output_format] (pinned by the PM): static HTML\n"
            "</immutable-anchors>"
        ) in request.system_text
    coder_first = requests_of(conversation_run, "coder")[0]
    # The note is volatile: it comes last, after the cue and every cache breakpoint.
    tail = coder_first.body["messages"][-1]["content"][-1]
    assert "coach specifically addressed you with @coder" in tail["text"]
    assert "cache_control" not in tail
    reviewer = requests_of(conversation_run, "reviewer")[0]
    assert "specifically addressed you" not in reviewer.dump
    # The anchors and the note are outside the cached stable prefix.
    first_block = coder_first.body["system"][0]
    assert first_block["cache_control"] == {"type": "ephemeral"}
    assert "<immutable-anchors>" not in first_block["text"]
    assert coder_first.body["tools"][-1]["cache_control"] == {"type": "ephemeral"}


def test_no_anchor_block_without_anchors(team, messages_api):
    api = messages_api([text("Hello.")])
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert "<immutable-anchors>" not in api.requests[0].system_text
    assert "specifically addressed" not in api.requests[0].system_text


def test_each_role_gets_its_toolset(conversation_run):
    for request in conversation_run.requests:
        names = set(request.tool_names)
        assert ALL <= names
        if request.agent == "coach":
            assert COACH_ONLY <= names
        else:
            assert not names & COACH_ONLY
        for tool_def in request.body["tools"]:
            assert tool_def["input_schema"]["type"] == "object"


def test_every_tool_use_is_answered_by_a_tool_result(conversation_run):
    checked = 0
    for request in conversation_run.requests:
        messages = request.body["messages"]
        assert messages[0]["role"] == "user" and messages[-1]["role"] == "user"
        for i, message in enumerate(messages):
            if message["role"] != "assistant" or isinstance(message["content"], str):
                continue
            uses = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
            if uses:
                answered = {
                    b["tool_use_id"]
                    for b in messages[i + 1]["content"]
                    if b["type"] == "tool_result"
                }
                assert answered == uses
                checked += 1
    assert checked == 1  # the coder's peer_message


def test_peer_message_reaches_inbox_and_next_turn(conversation_run, agents):
    inbox = Message.objects.get(recipient=agents["reviewer"])
    assert inbox.kind == "peer" and inbox.content == "check my layout"
    reviewer = requests_of(conversation_run, "reviewer")[0]
    assert "[Peer message from coder]: check my layout" in reviewer.dump
    assert "check my layout" not in requests_of(conversation_run, "researcher")[0].dump


def test_usage_and_cost_are_recorded(conversation_run, agents):
    coder_turn = Turn.objects.get(agent=agents["coder"])
    assert coder_turn.input_tokens == 400
    assert coder_turn.output_tokens == 60
    assert coder_turn.cache_read_tokens == 1000
    assert coder_turn.cost_usd > 0
    assert coder_turn.steps.count() == 3  # model, tool, model


def test_pm_answer_resumes_at_next_speaker_once(conversation_run, team, admin_user):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="HTML only.", user=admin_user)
    with pytest.raises(team_actions.Conflict, match="already answered"):
        pm_requests.pm_request_answer(request_id=request.id, answer="Second opinion.")
    team.refresh_from_db()
    assert team.status == Team.Status.RUNNING
    queued = Turn.objects.get(team=team, status="queued")
    assert queued.agent.name == "researcher"
    drain(team, limit=1)
    researcher = requests_of(conversation_run, "researcher")[-1]
    assert "[pm (admin)]: HTML only." in researcher.dump
    assert "Second opinion" not in researcher.dump
    assert Message.objects.filter(kind="pm").count() == 1


def test_529_then_success_completes_with_one_message(team, messages_api):
    api = messages_api([overloaded(), rate_limited(), text("Recovered.")])
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.DONE
    assert len(api.requests) == 3
    assert api.requests[0].headers.get("Authorization") == "Bearer sk-test-key"
    assert list(Message.objects.values_list("content", flat=True)) == ["Recovered."]
    assert turn.steps.count() == 1


def test_nul_characters_from_the_model_are_dropped_not_fatal(team, agents, messages_api):
    """PostgreSQL refuses NUL in text and jsonb; the model may still send one."""
    messages_api(
        [
            text("Half\x00way."),
            tool("peer_message", {"to": "coach", "content": "Psst\x00!"}),
            text("Done."),
        ]
    )
    team_actions.team_start(team=team)
    first, second = drain(team, limit=2)
    assert (first.status, second.status) == (Turn.Status.DONE, Turn.Status.DONE)
    assert Message.objects.get(turn=first).content == "Halfway."
    assert Message.objects.get(kind="peer").content == "Psst!"
    assert "\x00" not in str(second.steps.first().content)


def test_400_fails_the_turn_and_duplicates_nothing(team, messages_api):
    api = messages_api([bad_request("messages.0: content is empty")])
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.FAILED
    assert "400" in turn.error and "content is empty" in turn.error
    assert len(api.requests) == 1
    assert turn.steps.count() == 0
    team.refresh_from_db()
    assert team.status == Team.Status.PAUSED
    assert list(Message.objects.values_list("kind", flat=True)) == ["system"]
    assert not Turn.objects.filter(status__in=["queued", "running"]).exists()


class WorkerDied(BaseException):
    """Raised to stop a worker dead, as a killed process would."""


def run_then_die(turn, monkeypatch, target, name, after=True, when=lambda **kwargs: True):
    """Run the turn as "doomed-worker", which dies right after (or before) the first
    call to `target.name` (that `when` accepts), as a killed process would."""
    real = getattr(target, name)

    def die(*args, **kwargs):
        if not when(**kwargs):
            return real(*args, **kwargs)
        if after:
            real(*args, **kwargs)
        raise WorkerDied

    monkeypatch.setattr(target, name, die)
    with pytest.raises(WorkerDied):
        loop.run_turn(turn.id, "doomed-worker")
    monkeypatch.undo()


def sweep_after_the_lease(turn):
    Turn.objects.filter(pk=turn.pk).update(lease_expires_at=turn.queued_at)
    assert worker.sweep()["requeued"] == 1


def test_abandoned_turn_is_swept_and_resumes_without_repeating_tools(
    team, messages_api, monkeypatch
):
    api = messages_api(
        [
            tool("peer_message", {"to": "coder", "content": "ping"}, "toolu_once"),
            text("Done after the crash."),
        ]
    )
    team_actions.team_start(team=team)
    turn = Turn.objects.get(status="queued")
    # The worker dies once the tool's transaction (its message and its step) commits.
    run_then_die(turn, monkeypatch, registry, "execute")
    turn.refresh_from_db()
    assert turn.status == Turn.Status.RUNNING and turn.claimed_by == "doomed-worker"
    assert worker.sweep()["requeued"] == 0  # its lease has not expired yet

    Turn.objects.filter(pk=turn.pk).update(lease_expires_at=turn.started_at)
    assert worker.sweep()["requeued"] == 1
    finished = loop.run_turn(turn.id, "rescuer")
    assert finished.status == Turn.Status.DONE and finished.attempts == 2
    assert Message.objects.filter(kind="peer").count() == 1
    assert len(api.requests) == 2
    replay = api.requests[1].body["messages"]
    assert replay[-2]["content"][0]["id"] == "toolu_once"
    assert replay[-1]["content"][0]["tool_use_id"] == "toolu_once"
    assert [s.kind for s in finished.steps.order_by("index")] == ["model", "tool", "model"]
    assert Message.objects.filter(kind="chat").get().content == "Done after the crash."


def test_duplicate_wake_up_is_claimed_once(team):
    team_actions.team_start(team=team)
    turn = Turn.objects.get(status="queued")
    assert turns.turn_claim(turn.id, "a") is not None
    assert turns.turn_claim(turn.id, "b") is None


def test_a_turn_resumed_after_its_pass_was_recorded_still_passes(team, messages_api, monkeypatch):
    """The tool's TurnEnd is stored with its step: a resumed turn ends the way the
    first attempt's tool said, without calling the model or the tool again."""
    api = messages_api([tool("pass_turn", {"reason": "agree"}, "toolu_pass"), text("never")])
    team_actions.team_start(team=team)
    turn = Turn.objects.get(status="queued")
    run_then_die(turn, monkeypatch, turns, "turn_finish", after=False)
    assert TurnStep.objects.get(kind="tool").ends_turn == Turn.Outcome.PASS
    sweep_after_the_lease(turn)
    finished = loop.run_turn(turn.id, "rescuer")
    assert finished.outcome == Turn.Outcome.PASS and len(api.requests) == 1
    assert Message.objects.get(kind="pass_note").content == "(coach passes: agree)"


def test_a_tool_and_its_step_commit_together(team, agents, messages_api, monkeypatch):
    """A worker that dies while recording a tool's step takes the tool's writes with
    it, so the resumed turn runs the tool once: the phase advances once."""
    messages_api([tool("signal_phase_complete", {"summary": "Scope agreed."}, "toolu_done")])
    team_actions.team_start(team=team)
    turn = Turn.objects.get(status="queued")
    run_then_die(
        turn, monkeypatch, TurnStep.objects, "create", when=lambda **step: step["kind"] == "tool"
    )
    team.refresh_from_db()
    assert team.phase == "refinement" and not Message.objects.filter(kind="phase_summary")
    sweep_after_the_lease(turn)
    finished = loop.run_turn(turn.id, "rescuer")
    team.refresh_from_db()
    assert finished.outcome == Turn.Outcome.PHASE_COMPLETE and team.phase == "planning"
    assert Message.objects.filter(kind="phase_summary").count() == 1


def test_what_the_coach_says_closing_a_phase_comes_before_its_summary(team, messages_api):
    """Bug: the words beside signal_phase_complete were posted at the turn's end, after
    "Phase advanced to planning", so the conversation read the coach's closing remark
    as the first line of the next phase. Now they come first, once, in the phase closed."""
    messages_api(
        [tool("signal_phase_complete", {"summary": "Scope agreed."}, "toolu_done", say="Closing.")]
    )
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.outcome == Turn.Outcome.PHASE_COMPLETE
    rows = list(team.messages.order_by("id").values_list("kind", "phase", "content"))
    assert [(kind, phase) for kind, phase, _ in rows] == [
        ("chat", "refinement"),
        ("phase_summary", "refinement"),
        ("system", "planning"),
    ]
    assert rows[0][2] == "Closing." and rows[2][2] == "Phase advanced to planning."
    assert rows[1][2].startswith("[Phase refinement complete] Scope agreed.")


def test_the_step_limit_ends_a_turn_as_a_message_not_a_pass(team, messages_api):
    messages_api([tool("peer_discovery", {}, f"toolu_{i}") for i in range(loop.MAX_STEPS)])
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.outcome == Turn.Outcome.MESSAGE and turn.steps.count() == 2 * loop.MAX_STEPS
    assert not Message.objects.filter(kind="pass_note").exists()


def test_a_turn_that_lost_its_lease_during_its_last_call_still_counts_the_call(
    team, messages_api, monkeypatch
):
    """The call that ends a turn is kept with the turn's finish; when the sweeper gave
    the turn to another worker meanwhile, the result is dropped, but the call was
    made: its tokens and cost stay on the turn and the team."""
    messages_api(per_agent({"coach": [text("Hello, team.", input_tokens=300, output_tokens=40)]}))
    team_actions.team_start(team=team)
    turn = Turn.objects.get(team=team, status=Turn.Status.QUEUED)
    ask = loop._ask_model

    def ask_then_lose_the_lease(turn, worker, request, relay):
        reply = ask(turn, worker, request, relay)
        Turn.objects.filter(pk=turn.pk).update(claimed_by="worker-2")
        return reply

    monkeypatch.setattr(loop, "_ask_model", ask_then_lose_the_lease)
    loop.run_turn(turn.id, "worker-1")

    turn.refresh_from_db()
    team.refresh_from_db()
    assert (turn.status, turn.claimed_by) == (Turn.Status.RUNNING, "worker-2")
    assert (turn.input_tokens, turn.output_tokens) == (300, 40)
    assert turn.cost_usd > 0 and team.spent_usd == turn.cost_usd
    # worker-2 runs the turn: nothing of worker-1's result is logged or replayed
    assert not Message.objects.filter(turn=turn).exists()
    assert not TurnStep.objects.filter(turn=turn).exists()
