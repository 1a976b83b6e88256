"""Approvals: a call of an `ask` tool waits for the PM, through the real anthropic
client and the fake Messages API. A built-in tool set to `ask` stands in for any tool
(MCP tools take the same path: tests/teams/engine/test_mcp_tools.py)."""

import json

import pytest

from teams.conversation import pm_requests
from teams.errors import Conflict, InvalidInput
from teams.models import Message, PMRequest, Team, Turn, TurnStep, WebhookEvent
from teams.run import team_actions, turns
from tests.fakes.messages_api import text, tool
from tests.helpers import PEER_CALL, coder_asks_peer, drain, stop_at_approval
from tools import registry


@pytest.fixture
def waiting(team, messages_api):
    """The team stopped at the coder's peer_message, waiting for the PM."""
    return stop_at_approval(team, messages_api)


def _peer_notes(team):
    return Message.objects.filter(team=team, kind=Message.Kind.PEER)


def _coder_requests(api):
    return [r for r in api.requests if r.agent == "coder"]


def test_an_ask_tool_stops_the_turn_and_asks_the_pm(waiting, team):
    team.refresh_from_db()
    assert team.status == Team.Status.AWAITING_PM
    request = PMRequest.objects.get(team=team)
    assert request.kind == PMRequest.Kind.APPROVAL
    assert request.tool_name == "peer_message" and request.arguments == PEER_CALL
    assert "coder wants to call peer_message" in request.question
    assert json.dumps(PEER_CALL, indent=2) in request.question
    assert "Why (coder): The reviewer must see it." in request.question
    turn = Turn.objects.get(pk=request.turn_id)
    assert turn.status == Turn.Status.WAITING and turn.claimed_by == "test-worker"
    assert not _peer_notes(team).exists()  # nothing ran
    assert len(_coder_requests(waiting)) == 1


def test_approve_runs_the_call_once_and_never_asks_the_model_again(waiting, team):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="Approve")
    drain(team, limit=3)
    assert _peer_notes(team).count() == 1
    coder = _coder_requests(waiting)
    # One call made the tool_use; the one after it reads the result: no repeat.
    assert len(coder) == 2
    results = [b for b in coder[1].body["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert results[0]["tool_use_id"] == "toolu_peer" and "is_error" not in results[0]
    # The model reads that the PM approved it, before what the call returned.
    assert results[0]["content"].startswith("[The PM approved this call.]\n\nMessage sent")
    turn = Turn.objects.get(pk=request.turn_id)
    assert turn.status == Turn.Status.DONE
    assert turn.steps.filter(kind=TurnStep.Kind.TOOL).count() == 1
    assert Message.objects.filter(
        kind=Message.Kind.SYSTEM, content="the PM approved coder's call of peer_message."
    ).exists()


def test_deny_with_a_note_is_the_calls_error_result(waiting, team):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="Deny", note="Ask me first.")
    drain(team, limit=3)
    assert not _peer_notes(team).exists()
    coder = _coder_requests(waiting)
    assert len(coder) == 2
    result = coder[1].body["messages"][-1]["content"][0]
    assert result["is_error"] is True
    assert result["content"] == (
        'Error: the PM denied this call (the PM\'s reason: "Ask me first."). It did not run. '
        "Do not make it again unless the PM or the coach asks you to; carry on without it."
    )


def test_deny_without_a_note_says_the_pm_denied_it(waiting, team):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="Deny")
    drain(team, limit=3)
    result = _coder_requests(waiting)[1].body["messages"][-1]["content"][0]
    assert result["is_error"] is True
    assert result["content"].startswith("Error: the PM denied this call. It did not run.")


def test_approve_with_a_note_says_both(waiting, team):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="Approve", note="Just this once")
    drain(team, limit=3)
    result = _coder_requests(waiting)[1].body["messages"][-1]["content"][0]
    assert result["content"].startswith(
        "[The PM approved this call. The PM's note: Just this once]\n\nMessage sent"
    )


def test_approve_with_edited_arguments_runs_those(waiting, team):
    request = PMRequest.objects.get(team=team)
    edited = {"to": "researcher", "content": "check the sources"}
    pm_requests.pm_request_answer(request_id=request.id, answer="Approve", arguments=edited)
    drain(team, limit=3)
    note = _peer_notes(team).get()
    assert note.recipient.name == "researcher" and "check the sources" in note.content
    result = _coder_requests(waiting)[1].body["messages"][-1]["content"][0]
    # Said before the result, naming only what changed.
    assert result["content"].startswith(
        "[The PM approved this call. The PM changed your arguments before it ran; the result "
        'below is for the changed ones. Changed: to = "researcher"; content = '
        '"check the sources".]'
    )


def test_always_approve_with_edited_arguments_and_a_note_runs_those_and_says_so(waiting, team):
    """Always approve makes the tool auto before the turn resumes: the answer still
    decides how this call runs, and the model reads it."""
    request = PMRequest.objects.get(team=team)
    edited = {"to": "researcher", "content": "check the sources"}
    pm_requests.pm_request_answer(
        request_id=request.id, answer="Always approve", arguments=edited, note="Researcher first."
    )
    drain(team, limit=3)
    note = _peer_notes(team).get()
    assert note.recipient.name == "researcher" and "check the sources" in note.content
    result = _coder_requests(waiting)[1].body["messages"][-1]["content"][0]
    assert result["content"].startswith(
        "[The PM approved this call, and later calls of peer_message will run without asking. "
        "The PM changed your arguments before it ran;"
    )
    assert "The PM's note: Researcher first.]" in result["content"]


@pytest.mark.parametrize(
    "answer, extra, field",
    [
        ("Approve", {"arguments": {"to": "reviewer"}}, "arguments"),  # content missing
        ("Approve", {"arguments": {"to": "reviewer", "content": "x", "cc": 1}}, "arguments"),
        ("Deny", {"arguments": PEER_CALL}, "arguments"),
        ("Approve", {"pin_as": "decision"}, "pin_as"),
        ("Maybe", {}, "answer"),
    ],
)
def test_bad_answers_change_nothing(waiting, team, answer, extra, field):
    request = PMRequest.objects.get(team=team)
    with pytest.raises(InvalidInput) as caught:
        pm_requests.pm_request_answer(request_id=request.id, answer=answer, **extra)
    assert caught.value.field == field
    request.refresh_from_db()
    assert request.status == PMRequest.Status.OPEN
    assert Turn.objects.get(pk=request.turn_id).status == Turn.Status.WAITING
    assert not _peer_notes(team).exists()


def test_always_approve_stops_asking_for_that_tool(team, messages_api):
    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "ask"})
    api = coder_asks_peer(
        messages_api,
        after=[tool("peer_message", PEER_CALL, "toolu_peer2"), text("Sent again.")],
    )
    team_actions.team_start(team=team)
    drain(team)
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="Always approve")
    drain(team, limit=6)
    team.refresh_from_db()
    assert team.tool_approvals == {"peer_message": "auto"}
    assert PMRequest.objects.filter(team=team).count() == 1
    assert _peer_notes(team).count() == 2
    assert team.status == Team.Status.RUNNING
    coder = _coder_requests(api)
    assert len(coder) == 4
    approved, later = (coder[i].body["messages"][-1]["content"][0]["content"] for i in (1, 3))
    assert approved.startswith(
        "[The PM approved this call, and later calls of peer_message will run without asking.]\n\n"
    )
    assert not later.startswith("[The PM")  # it ran without asking: no approval to tell


def test_an_answer_before_the_turn_has_stopped_still_resumes_it(team, messages_api, monkeypatch):
    """The PM answers in the moment between the request's opening and the turn's stop
    (it was still running, so the answer could not queue it): the turn goes on."""
    from teams.conversation import approvals

    opened = approvals.approval_request_open

    def open_and_answer_at_once(**kwargs):
        request = opened(**kwargs)
        pm_requests.pm_request_answer(request_id=request.id, answer="Approve")
        return request

    monkeypatch.setattr(approvals, "approval_request_open", open_and_answer_at_once)
    stop_at_approval(team, messages_api)
    turn = Turn.objects.get(pk=PMRequest.objects.get(team=team).turn_id)
    assert turn.status == Turn.Status.DONE
    assert _peer_notes(team).count() == 1


def test_the_wait_survives_a_restart_and_a_second_answer_is_refused(waiting, team):
    """No worker holds a waiting turn: the sweeper leaves it alone, any worker resumes
    it after the answer, and the tool runs exactly once."""
    request = PMRequest.objects.get(team=team)
    assert turns.turns_requeue_abandoned() == (0, 0)
    assert turns.teams_restart_stalled() == 0
    pm_requests.pm_request_answer(request_id=request.id, answer="Approve")
    with pytest.raises(Conflict):
        pm_requests.pm_request_answer(request_id=request.id, answer="Approve")
    drain(team, worker="another-worker", limit=3)
    assert _peer_notes(team).count() == 1
    assert len(_coder_requests(waiting)) == 2


def test_paused_while_waiting_then_answered_and_resumed(waiting, team):
    request = PMRequest.objects.get(team=team)
    team_actions.team_pause(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="Approve")
    assert not Turn.objects.filter(team=team, status=Turn.Status.QUEUED).exists()
    team_actions.team_resume(team=team)
    drain(team, limit=3)
    assert _peer_notes(team).count() == 1


def test_resumed_while_the_approval_is_open_waits_for_the_pm_again(waiting, team):
    team_actions.team_pause(team=team)
    team_actions.team_resume(team=team)
    team.refresh_from_db()
    assert team.status == Team.Status.AWAITING_PM
    assert not Turn.objects.filter(team=team, status=Turn.Status.QUEUED).exists()


def test_an_ask_tool_tells_the_model_it_waits_for_the_pm(team):
    coder = team.agents.get(name="coder")
    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "ask"})
    team.refresh_from_db()
    described = {
        d["name"]: d["description"]
        for d in registry.definitions(registry.toolset(coder, team), team)
    }
    assert described["peer_message"].endswith(registry.ASKS_THE_PM)
    assert registry.ASKS_THE_PM not in described["peer_discovery"]


def test_never_tools_are_not_offered_and_auto_is_the_default(team):
    coder = team.agents.get(name="coder")
    assert "peer_message" in {t.name for t in registry.toolset(coder, team)}
    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "never"})
    team.refresh_from_db()
    assert "peer_message" not in {t.name for t in registry.toolset(coder, team)}


def test_approval_requested_webhook(team, messages_api):
    from teams.integrations.webhooks import webhook_create
    from teams.models import WebhookDelivery

    hook, _secret = webhook_create(
        team=team,
        url="https://hooks.example.test/loom",
        events=[WebhookEvent.APPROVAL_REQUESTED, WebhookEvent.PM_REQUEST_OPENED],
    )
    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "ask"})
    coder_asks_peer(messages_api)
    team_actions.team_start(team=team)
    drain(team)
    delivery = WebhookDelivery.objects.get(webhook=hook)
    assert delivery.event == "approval.requested"
    assert delivery.payload["data"]["tool"] == "peer_message"
    assert delivery.payload["data"]["arguments"] == PEER_CALL
