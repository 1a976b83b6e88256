"""Asking a consultant that is an A2A agent, through the official a2a-sdk client.

The request's text goes as one message; the answer is what the agent hands back when
its task stops: a completed task's text artifacts (or its status message), or, for
an `input-required` task, the agent's question (the asking agent reads it as the
answer: a consultation is one exchange, and Loom never answers in its place). A
message instead of a task is the answer as it is. The whole exchange (the card, the
message, the polls) ends within `seconds`; a task still open then is canceled, so a
hired run does not go on spending for nobody.

Every connection goes through the outbound guard (teams.lib.outbound_httpx): the
card's URL and whatever URL the card names for its endpoint, each address checked and
connected to as checked. The bearer token travels only in the Authorization header:
it is in no error text, record or log line.

The SDK is async; a tool runs in a worker thread, so each ask runs its own event loop
(ask_multi's calls run side by side in threads of their own)."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from a2a.client import A2ACardResolver, A2AClientTimeoutError, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

from teams.errors import ModelError
from teams.lib import outbound_httpx

MAX_ANSWER_BYTES = 2 * 1024 * 1024  # of one HTTP answer (a card, a task)
POLL_FIRST, POLL_MOST = 0.25, 2.0  # seconds between two reads of an open task
CANCEL_SECONDS = 5  # given to cancel a task the deadline left open
CARD_PATH = "/.well-known/"
STOPS = {  # the states in which a task has said all it will say to this message
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}


@dataclass
class A2AAnswer:
    text: str
    task_id: str  # "" when the agent answered with a message, not a task
    asks: bool = False  # the task is input-required: the text is the agent's question


def ask(*, name: str, url: str, token: str, text: str, seconds: float) -> A2AAnswer:
    """Ask the A2A agent whose card is at `url`; ModelError saying why when it cannot
    be asked, does not answer within `seconds`, or its task fails."""
    coroutine = _ask(name=name, url=url, token=token, text=text, seconds=seconds)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _scrubbed(asyncio.run, coroutine, token)
    with ThreadPoolExecutor(1, thread_name_prefix="loom-a2a") as pool:  # a loop runs here
        return pool.submit(_scrubbed, asyncio.run, coroutine, token).result()


def _scrubbed(run, coroutine, token: str) -> A2AAnswer:
    """The answer; a ModelError's text never carries the token (whatever echoed it)."""
    try:
        return run(coroutine)
    except ModelError as exc:
        if token and token in exc.message:
            raise ModelError(exc.message.replace(token, "[hidden]")) from None
        raise


async def _ask(*, name: str, url: str, token: str, text: str, seconds: float) -> A2AAnswer:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with outbound_httpx.async_client(
        timeout=seconds, max_response_bytes=MAX_ANSWER_BYTES, headers=headers
    ) as http:
        state = {"client": None, "task": None}
        try:
            async with asyncio.timeout(seconds):
                return await _exchange(http, url, text, state)
        except (TimeoutError, httpx.TimeoutException, A2AClientTimeoutError) as exc:
            said = await _given_up(state)
            raise ModelError(
                f"The A2A agent {name} did not answer within {seconds:g} s{said}."
            ) from exc
        except (A2AError, httpx.HTTPError) as exc:
            raise ModelError(_unreachable(name, exc)) from exc


async def _exchange(http, url: str, text: str, state: dict) -> A2AAnswer:
    """Resolve the card, send the message, read the task until it stops."""
    if CARD_PATH in url:  # the card's own URL
        resolver = A2ACardResolver(http, url, agent_card_path="")
    else:  # the agent's base URL: its card is at the well-known path under it
        resolver = A2ACardResolver(http, url)
    card = await resolver.get_agent_card()
    # polling: the agent answers at once with its task, which is then read again.
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False, polling=True)).create(
        card
    )
    state["client"] = client
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    task = None
    async for event in client.send_message(SendMessageRequest(message=message)):
        if event.HasField("message"):
            return A2AAnswer(text=get_message_text(event.message), task_id="")
        task = event.task
    if task is None:
        raise ModelError("The A2A agent answered with neither a task nor a message.")
    state["task"] = task
    wait = POLL_FIRST
    while task.status.state not in STOPS:
        await asyncio.sleep(wait)
        wait = min(wait * 2, POLL_MOST)
        task = await client.get_task(GetTaskRequest(id=task.id, history_length=0))
        state["task"] = task
    return _answer(task)


def _state_word(state) -> str:
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _answer(task: Task) -> A2AAnswer:
    """What a stopped task says: its question, its artifacts' text, or why it failed."""
    said = get_message_text(task.status.message).strip() if task.status.HasField("message") else ""
    state = task.status.state
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        question = said or "(the agent asks for input, saying nothing)"
        return A2AAnswer(text=question, task_id=task.id, asks=True)
    if state != TaskState.TASK_STATE_COMPLETED:
        why = f": {said}" if said else ""
        raise ModelError(f"The A2A agent's task {task.id} ended {_state_word(state)}{why}")
    texts = [(a.name, get_artifact_text(a).strip()) for a in task.artifacts]
    texts = [(n, t) for n, t in texts if t]
    if len(texts) == 1:
        return A2AAnswer(text=texts[0][1], task_id=task.id)
    if texts:
        body = "\n\n".join(f"### {n or 'artifact'}\n{t}" for n, t in texts)
        return A2AAnswer(text=body, task_id=task.id)
    return A2AAnswer(text=said or "(the task completed with no text)", task_id=task.id)


async def _given_up(state: dict) -> str:
    """Cancel the task the deadline left open; what to add to the error about it."""
    client, task = state["client"], state["task"]
    if client is None or task is None:
        return ""
    where = f" (its task {task.id} was still {_state_word(task.status.state)}"
    try:
        await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task.id)), CANCEL_SECONDS)
    except (TimeoutError, A2AError, httpx.HTTPError):
        return where + "; canceling it failed)"
    return where + "; it was canceled)"


def _unreachable(name: str, exc: BaseException) -> str:
    refused = outbound_httpx.refusal_in(exc)
    if refused:
        return f"Consultant {name} is not asked: its A2A URL is refused: {refused}."
    return f"Could not ask the A2A agent {name}: {exc}"
