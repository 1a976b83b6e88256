"""The A2A requests of one published team, answered from Loom's database.

a2a-sdk's JSON-RPC routes parse each request and call this handler (the SDK's
`RequestHandler` interface); the SDK writes the responses and the SSE streams. A
task is a hired run (teams.history.hiring): its id is the run's slug; its state,
status message and artifacts are read from the run each time, so nothing lives in
this process's memory and any process answers any request. Streams follow a run
by reading it again every STREAM_POLL seconds (the database is the truth; the
live events are only wake-ups and a stream that missed one still sees the change)."""

from __future__ import annotations

import asyncio
import uuid

from a2a.helpers.proto_helpers import get_text_parts
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    Artifact,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    ListTasksResponse,
    Message,
    Part,
    PushNotificationNotSupportedError,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from channels.db import database_sync_to_async

from teams.errors import Conflict, InvalidInput, NotFound
from teams.history import hiring
from teams.history.hiring import HireState
from teams.models import Message as LoomMessage
from teams.models import Team

STREAM_POLL = 0.5  # seconds between two reads of a followed run
HISTORY_DEFAULT = 20  # conversation messages a task carries unless asked for another number
PAGE_MAX = 100
# What a conversation message a hirer sees: the agents' words, not tool traffic.
SHOWN_KINDS = (
    LoomMessage.Kind.CHAT,
    LoomMessage.Kind.PM,
    LoomMessage.Kind.PHASE_SUMMARY,
    LoomMessage.Kind.SEAT,
)
STATES = {
    HireState.WORKING: TaskState.TASK_STATE_WORKING,
    HireState.INPUT_REQUIRED: TaskState.TASK_STATE_INPUT_REQUIRED,
    HireState.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    HireState.FAILED: TaskState.TASK_STATE_FAILED,
    HireState.CANCELED: TaskState.TASK_STATE_CANCELED,
}
# A stream ends when its run reaches one of these (input-required waits for the hirer).
STREAM_ENDS = (
    HireState.COMPLETED,
    HireState.FAILED,
    HireState.CANCELED,
    HireState.INPUT_REQUIRED,
)


def _agent_message(run: Team, text: str, message_id: str | None = None) -> Message:
    return Message(
        message_id=message_id or uuid.uuid4().hex,
        context_id=run.slug,
        task_id=run.slug,
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )


def _artifacts(run: Team) -> list[Artifact]:
    summary = Artifact(
        artifact_id="summary",
        name="summary",
        description="The team's final summary.",
        parts=[Part(text=hiring.final_summary(run))],
    )
    files = [
        Artifact(
            artifact_id=f"file:{path}",
            name=path,
            description=f"The workspace file {path}.",
            parts=[Part(text=text, filename=path, media_type="text/plain")],
        )
        for path, text in hiring.hire_files(run)
    ]
    return [summary, *files]


def _history(run: Team, length: int) -> list[Message]:
    if length <= 0:
        return []
    rows = list(
        LoomMessage.objects.filter(team=run, kind__in=SHOWN_KINDS)
        .select_related("author")
        .order_by("-id")[:length]
    )
    return [_conversation_message(run, row) for row in reversed(rows)]


def _conversation_message(run: Team, row: LoomMessage) -> Message:
    who = row.author.name if row.author_id else "PM"
    return _agent_message(run, f"{who}: {row.content}", message_id=f"m{row.pk}")


def task_of(run: Team, *, history: int = HISTORY_DEFAULT, artifacts: bool = True) -> Task:
    """The run as an A2A task, read now."""
    run.refresh_from_db()
    state = hiring.hire_state(run)
    done = state.state == HireState.COMPLETED
    return Task(
        id=run.slug,
        context_id=run.slug,
        status=TaskStatus(
            state=STATES[state.state],
            message=_agent_message(run, state.text, message_id=f"status-{run.slug}"),
            timestamp=run.updated_at,
        ),
        artifacts=_artifacts(run) if done and artifacts else [],
        history=_history(run, history),
    )


def _text_and_files(message: Message) -> tuple[str, dict[str, str]]:
    text = "\n".join(get_text_parts([p for p in message.parts if not p.filename]))
    files = {}
    for part in message.parts:
        if not part.filename:
            continue
        if part.HasField("raw"):
            try:
                files[part.filename] = part.raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidParamsError(f"{part.filename}: only UTF-8 text files.") from None
        elif part.HasField("text"):
            files[part.filename] = part.text
        else:
            raise InvalidParamsError(f"{part.filename}: a file part needs its bytes or text.")
    return text, files


class TeamRequestHandler(RequestHandler):
    """Every A2A method for the team in the call's context (teams.a2a.asgi puts the
    template team and the caller there after checking the token)."""

    @staticmethod
    def _template(context) -> Team:
        return context.state["loom_team"]

    @database_sync_to_async
    def _run(self, context, task_id: str) -> Team:
        try:
            return hiring.hired_run(template=self._template(context), slug=task_id)
        except NotFound as exc:
            raise TaskNotFoundError(str(exc)) from None

    @database_sync_to_async
    def _send(self, params, context) -> Team:
        _writable(context, "send a message")
        text, files = _text_and_files(params.message)
        template = self._template(context)
        try:
            if params.message.task_id:
                run = hiring.hired_run(template=template, slug=params.message.task_id)
                hiring.hire_answer(run=run, text=text, user=context.state.get("loom_user"))
                return run
            return hiring.hire_start(
                template=template, goal=text, files=files, label=context.state["loom_label"]
            )
        except NotFound as exc:
            raise TaskNotFoundError(str(exc)) from None
        except InvalidInput as exc:
            raise InvalidParamsError(str(exc)) from None
        except Conflict as exc:
            raise InvalidRequestError(str(exc)) from None

    async def on_message_send(self, params, context):
        run = await self._send(params, context)
        return await database_sync_to_async(task_of)(run, history=_length(params))

    async def on_message_send_stream(self, params, context):
        run = await self._send(params, context)
        async for event in self._follow(run, first=True):
            yield event

    async def on_subscribe_to_task(self, params, context):
        run = await self._run(context, params.id)
        async for event in self._follow(run, first=True, stop_on_input=False):
            yield event

    async def on_get_task(self, params, context):
        run = await self._run(context, params.id)
        return await database_sync_to_async(task_of)(run, history=_length(params))

    async def on_list_tasks(self, params, context):
        return await database_sync_to_async(self._list)(params, context)

    def _list(self, params, context) -> ListTasksResponse:
        size = min(params.page_size or 50, PAGE_MAX)
        try:
            start = int(params.page_token or 0)
        except ValueError:
            raise InvalidParamsError("page_token: the token a previous page gave.") from None
        runs = hiring.hired_runs(template=self._template(context))
        total = runs.count()
        page = list(runs[start : start + size])
        tasks = [
            task_of(run, history=_length(params, 0), artifacts=params.include_artifacts)
            for run in page
        ]
        if params.status:
            tasks = [t for t in tasks if t.status.state == params.status]
        more = start + size < total
        return ListTasksResponse(
            tasks=tasks,
            next_page_token=str(start + size) if more else "",
            page_size=size,
            total_size=total,
        )

    async def on_cancel_task(self, params, context):
        _writable(context, "cancel a task")
        run = await self._run(context, params.id)

        def cancel() -> Task:
            try:
                hiring.hire_cancel(run=run)
            except Conflict as exc:
                raise TaskNotCancelableError(str(exc)) from None
            return task_of(run)

        return await database_sync_to_async(cancel)()

    async def _follow(self, run: Team, *, first: bool, stop_on_input: bool = True):
        """The run's task, then each new conversation message and each change of its
        state as status updates (a Message event would end the stream), until it
        completes, fails, is canceled or (for a message just sent) needs input; a
        completed run's artifacts come before its last status."""
        task = await database_sync_to_async(task_of)(run, history=0)
        yield task
        last_state, last_text = task.status.state, task.status.message.parts[0].text
        seen = await database_sync_to_async(_last_message_id)(run)
        while not _ends(last_state, stop_on_input):
            await asyncio.sleep(STREAM_POLL)
            rows, task = await database_sync_to_async(_changes)(run, seen)
            for row in rows:  # the conversation, as status updates of a working task
                seen = row.pk
                said = TaskStatus(state=last_state, message=_conversation_message(run, row))
                yield TaskStatusUpdateEvent(task_id=run.slug, context_id=run.slug, status=said)
            state, text = task.status.state, task.status.message.parts[0].text
            if (state, text) == (last_state, last_text):
                continue
            if state == TaskState.TASK_STATE_COMPLETED:
                for artifact in task.artifacts:
                    yield TaskArtifactUpdateEvent(
                        task_id=run.slug, context_id=run.slug, artifact=artifact, last_chunk=True
                    )
            yield TaskStatusUpdateEvent(task_id=run.slug, context_id=run.slug, status=task.status)
            last_state, last_text = state, text

    async def on_create_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError(PUSH_NOT_BUILT)

    async def on_get_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError(PUSH_NOT_BUILT)

    async def on_list_task_push_notification_configs(self, params, context):
        raise PushNotificationNotSupportedError(PUSH_NOT_BUILT)

    async def on_delete_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError(PUSH_NOT_BUILT)

    async def on_get_extended_agent_card(self, params, context):
        raise ExtendedAgentCardNotConfiguredError("This agent has no extended card.")


PUSH_NOT_BUILT = (
    "Push notifications are not offered: stream the task (SubscribeToTask) or poll it "
    "(GetTask); a team's webhooks (POST /api/teams/{team}/webhooks) tell a PM's server."
)


def _length(params, default: int = HISTORY_DEFAULT) -> int:
    """The history length the request asked for (on itself or its configuration)."""
    for holder in (params, getattr(params, "configuration", None)):
        try:
            if holder is not None and holder.HasField("history_length"):
                return max(0, int(holder.history_length))
        except ValueError:  # this message has no such field
            continue
    return default


def _writable(context, doing: str) -> None:
    if context.state.get("loom_read_only"):
        raise InvalidRequestError(
            f"This token is read-only: it may read tasks but not {doing}. "
            "Use a token made without --read-only."
        )


def _ends(state, stop_on_input: bool) -> bool:
    ends = [STATES[s] for s in STREAM_ENDS if stop_on_input or s != HireState.INPUT_REQUIRED]
    return state in ends


def _last_message_id(run: Team) -> int:
    last = LoomMessage.objects.filter(team=run).order_by("-id").values_list("id", flat=True)
    return last.first() or 0


def _changes(run: Team, seen: int) -> tuple[list[LoomMessage], Task]:
    rows = list(
        LoomMessage.objects.filter(team=run, kind__in=SHOWN_KINDS, pk__gt=seen)
        .select_related("author")
        .order_by("id")[:50]
    )
    return rows, task_of(run, history=0)
