"""Fake A2A agents for the tests, written with the official a2a-sdk's server (its
request handler, task store and JSON-RPC routes), on one loopback port, served by
uvicorn in a thread. Four agents, each with its card at
`/{agent}/.well-known/agent-card.json` and its endpoint at `/{agent}/`:

- `answer`: completes the task with ANSWER as a text artifact;
- `ask`: stops the task as input-required, asking QUESTION;
- `stall`: works on the task and never finishes (until it is canceled);
- `fail`: fails the task, saying FAILURE.

`seen` keeps each request's path and Authorization header; `asked` each message's
text, by agent; `canceled` the tasks canceled."""

from __future__ import annotations

import asyncio

from a2a.helpers.proto_helpers import new_task, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)

from tests.fakes.mcp_servers import ServedInThread, free_port

ANSWER = "Use a trie for the word index: lookups stay linear in the word's length."
QUESTION = "Which language should the word counter be written in?"
FAILURE = "The word index is corrupt."
AGENTS = ("answer", "ask", "stall", "fail")


class FakeExecutor(AgentExecutor):
    def __init__(self, kind: str, server: FakeA2AAgents):
        self.kind, self.server = kind, server

    async def execute(self, context: RequestContext, event_queue) -> None:
        self.server.asked.setdefault(self.kind, []).append(context.get_user_input())
        task = context.current_task or new_task(
            context.task_id,
            context.context_id,
            TaskState.TASK_STATE_SUBMITTED,
            history=[context.message],
        )
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if self.kind == "answer":
            await updater.add_artifact([Part(text=ANSWER)], name="answer")
            await updater.complete()
        elif self.kind == "ask":
            question = new_text_message(QUESTION, context_id=task.context_id, task_id=task.id)
            await updater.requires_input(question)
        elif self.kind == "fail":
            await updater.failed(new_text_message(FAILURE, task_id=task.id))
        else:
            await asyncio.sleep(3600)

    async def cancel(self, context: RequestContext, event_queue) -> None:
        self.server.canceled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card(kind: str, url: str) -> AgentCard:
    return AgentCard(
        name=f"fake-{kind}",
        description=f"A fake A2A agent that {kind}s.",
        version="1.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=kind, name=kind, description=kind, tags=["fake"])],
    )


class FakeA2AAgents(ServedInThread):
    """The agents on http://127.0.0.1:<port>/{agent}/; `url(agent)` is its base
    URL, `card_url(agent)` its card's."""

    def __init__(self):
        from starlette.applications import Starlette

        self.what = "the fake A2A agents"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.seen: list[tuple[str, str]] = []
        self.asked: dict[str, list[str]] = {}
        self.canceled: list[str] = []
        routes = []
        for kind in AGENTS:
            agent_card = card(kind, self.url(kind))
            handler = DefaultRequestHandler(
                agent_executor=FakeExecutor(kind, self),
                task_store=InMemoryTaskStore(),
                agent_card=agent_card,
            )
            routes += create_agent_card_routes(
                agent_card, card_url=f"/{kind}/.well-known/agent-card.json"
            )
            routes += create_jsonrpc_routes(handler, rpc_url=f"/{kind}/")
        inner = Starlette(routes=routes)
        seen = self.seen

        async def app(scope, receive, send):
            if scope["type"] == "http":
                headers = dict(scope.get("headers", []))
                seen.append((scope["path"], headers.get(b"authorization", b"").decode()))
            await inner(scope, receive, send)

        self.serve(app, lifespan="off")

    def url(self, kind: str) -> str:
        return f"{self.base}/{kind}/"

    def card_url(self, kind: str) -> str:
        return f"{self.base}/{kind}/.well-known/agent-card.json"
