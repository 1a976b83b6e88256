"""A published team hired over A2A as another agent's program does it: the official
a2a-sdk client against `manage.py serve` (a child process on the test database),
the team on the offline model.

The hirer resolves the card, sends a message (a run starts: `working`), sees the
coach's question (`input-required`), answers it on a stream that brings the status
updates in order, answers whatever else the run asks (an approval gets "Approve"),
and sees the run `completed` with the final summary and the workspace files as
artifacts; it lists its tasks and cancels a second one. A token of another team
finds nothing, and an unpublished team has no card."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)

from teams.lib.catalog import OFFLINE_MODEL
from teams.models import Team
from tests import live_site
from tests.helpers import api_token, make_team, make_user

WAIT_SECONDS = 120
GOAL = "Write a short design note for a command-line word counter."
AGENTS = [
    {"name": "coach", "role": "coach", "model": OFFLINE_MODEL},
    {"name": "coder", "role": "coder", "model": OFFLINE_MODEL},
]


@pytest.fixture
def sites(transactional_db, request):
    sites = live_site.Sites(request.node.name)
    yield sites
    sites.close()


def _message(text: str, task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            message_id=f"m-{time.monotonic_ns()}",
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            task_id=task_id,
        )
    )


def _client(http: httpx.AsyncClient, card, *, streaming: bool):
    return ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)


async def _wait_for(client, task_id: str, states: set) -> object:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in states:
            return task
        await asyncio.sleep(0.5)
    raise AssertionError(f"task {task_id} never reached {states}: {task.status}")


def _reply_to(text: str) -> str:
    return "Approve" if "Answer Approve or Deny" in text else "Keep it small: one module."


async def _hire(url: str, key: str, other_key: str) -> dict:
    seen: dict = {}
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=30, trust_env=False) as http:
        card = await A2ACardResolver(http, f"{url}/a2a/hire/").get_agent_card()
        seen["card"] = card
        plain = _client(http, card, streaming=False)
        streaming = _client(http, card, streaming=True)
        [first] = [event async for event in plain.send_message(_message(GOAL))]
        task_id = first.task.id
        seen["first"] = first.task
        asking = await _wait_for(plain, task_id, {TaskState.TASK_STATE_INPUT_REQUIRED})
        seen["question"] = asking.status.message.parts[0].text
        seen["streamed"] = []
        reply = _reply_to(seen["question"])
        for _ in range(6):  # the coach's question, then an approval or two
            events = [e async for e in streaming.send_message(_message(reply, task_id))]
            seen["streamed"].append(events)
            last = events[-1]
            status = last.status_update.status if last.HasField("status_update") else None
            if status is None or status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                break
            reply = _reply_to(status.message.parts[0].text)
        seen["done"] = await _wait_for(
            plain, task_id, {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED}
        )
        [second] = [e async for e in plain.send_message(_message("A second, short run."))]
        seen["canceled"] = await plain.cancel_task(CancelTaskRequest(id=second.task.id))
        seen["listed"] = await plain.list_tasks(ListTasksRequest())
    other = {"Authorization": f"Bearer {other_key}"}
    async with httpx.AsyncClient(headers=other, timeout=30, trust_env=False) as http:
        stranger = _client(http, card, streaming=False)
        try:
            await stranger.get_task(GetTaskRequest(id=task_id))
        except A2AClientError as exc:
            seen["stranger"] = str(exc)
        async with httpx.AsyncClient(timeout=30, trust_env=False) as bare:
            seen["unpublished"] = await bare.get(f"{url}/a2a/other/.well-known/agent-card.json")
    seen["task_id"] = task_id
    return seen


def test_a_program_hires_a_published_team_and_sees_it_through(sites):
    template = make_team(
        "hire",
        goal="Small command-line tools, designed and written.",
        agents=AGENTS,
        phases=["planning", "implementation"],
    )
    Team.objects.filter(pk=template.pk).update(a2a=True)
    pm = make_user("hirer-pm", manages=[template])
    key = api_token(user=pm, label="orchestrator")
    other = make_team("other", agents=AGENTS)
    other_key = api_token(team=other, label="other-team")
    site = sites.start()

    seen = asyncio.run(_hire(site.url, key, other_key))

    card = seen["card"]
    assert card.name == "Hire"
    assert [skill.id for skill in card.skills] == ["planning", "implementation"]
    assert card.capabilities.streaming is True
    assert seen["first"].status.state == TaskState.TASK_STATE_WORKING
    run = Team.objects.get(slug=seen["task_id"])
    assert (run.hired_from_id, run.goal, run.hired_by) == (template.pk, GOAL, "token orchestrator")
    assert seen["question"].startswith("coach asks:")
    # The answer's stream: the task first, then the run's changes in order, ending on
    # the next request or the end.
    first_stream = seen["streamed"][0]
    assert first_stream[0].HasField("task")
    states = [e.status_update.status.state for e in first_stream if e.HasField("status_update")]
    kinds = [[f.name for f, _ in e.ListFields()] for e in first_stream]
    assert states and states[-1] in (
        TaskState.TASK_STATE_INPUT_REQUIRED,
        TaskState.TASK_STATE_COMPLETED,
    ), (kinds, first_stream[-1])
    done = seen["done"]
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, done.status
    names = [artifact.name for artifact in done.artifacts]
    assert names[0] == "summary"
    assert done.artifacts[0].parts[0].text.strip()
    files = {a.name: a.parts[0].text for a in done.artifacts[1:]}
    on_disk = {p for p in files}
    assert on_disk, "the offline coder writes at least one file"
    assert seen["canceled"].status.state == TaskState.TASK_STATE_CANCELED
    assert Team.objects.get(slug=seen["canceled"].id).status == Team.Status.PAUSED
    listed = {task.id: task.status.state for task in seen["listed"].tasks}
    assert listed[seen["task_id"]] == TaskState.TASK_STATE_COMPLETED
    assert listed[seen["canceled"].id] == TaskState.TASK_STATE_CANCELED
    assert "not found" in seen["stranger"].lower() or "404" in seen["stranger"]
    assert seen["unpublished"].status_code == 404
