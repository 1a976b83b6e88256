"""Question tools: ask, answer and forward questions between agents, and how an
agent reads the questions and answers in its inbox (inbox_line).

A question an agent may still answer carries the reply hint naming its query id;
once it is answered, expired, or forwarded on by that agent, it leaves the agent's
context. The agent's own record of each call (digest) says what it asked, answered
or forwarded, so its later requests in the phase hold its own question."""

import re

from pydantic import Field

from teams.conversation import questions
from teams.models import HUMAN_TEXT_LIMIT, SHORT_TEXT_LIMIT, Message, Query
from tools.base import Params, Tool, ToolContext, ToolResult, _short
from tools.registry import register

QUERY_ID = re.compile(r"Query ID: (q-[0-9a-f]+)")
DIGEST_TEXT_CHARS = 160


class AskParams(Params):
    question: str = Field(
        min_length=1, max_length=HUMAN_TEXT_LIMIT, description="The question to ask"
    )
    target: str | None = Field(
        default=None,
        max_length=SHORT_TEXT_LIMIT,
        description="Name of a specific agent to ask. Omit to broadcast to all.",
    )
    context: str | None = Field(
        default=None,
        max_length=HUMAN_TEXT_LIMIT,
        description="Additional context relevant to the question",
    )


@register
class PeerAskQuestion(Tool):
    name = "peer_ask_question"
    description = (
        "Ask a question to the team. The question is routed to a specific agent (if named) "
        "or broadcast to all. Answers are delivered back to you asynchronously. The system "
        "automatically enriches questions with relevant context from keepers."
    )
    Params = AskParams
    failures_are_results = True

    def run(self, params: AskParams, ctx: ToolContext) -> str:
        query = questions.ask(
            team=ctx.team,
            origin=ctx.agent,
            question=params.question,
            target=params.target,
            context=params.context,
        )
        target = query.target.name if query.target_id else "all agents"
        return (
            f"Question sent to {target}. Query ID: {query.key}. The answer will be delivered "
            "to you when available."
        )

    @classmethod
    def digest(cls, params: AskParams, result: ToolResult) -> str:
        found = QUERY_ID.search(result.text)
        if found is None:
            return ""
        target = params.target.lstrip("@") if params.target else "everyone"
        question = _short(params.question, DIGEST_TEXT_CHARS)
        return f'You asked {target} (query {found[1]}): "{question}"'


def no_open_question(tool: str, verb: str, agent, messages: list[Message]) -> str:
    """Why `tool` (an answer, a forward) can do nothing for `agent` in the history
    `messages`, or "": its query_id is that of a question put to the agent and still
    open for it, which its history shows with the reply hint."""
    for message in messages:
        if message.kind == Message.Kind.QUERY and message.recipient_id == agent.id:
            if questions.open_for(message, agent):
                return ""
    return (
        f"{agent.name} has no question open to {verb}: {tool} needs the query_id of a "
        f"question routed to {agent.name} that is still open (the agent's history shows "
        "each one with its query_id)."
    )


class AnswerParams(Params):
    query_id: str = Field(
        min_length=1,
        max_length=SHORT_TEXT_LIMIT,
        description="The query ID from the question you received",
    )
    answer: str = Field(
        min_length=1, max_length=HUMAN_TEXT_LIMIT, description="Your answer to the question"
    )


@register
class PeerAnswerQuestion(Tool):
    name = "peer_answer_question"
    description = (
        "Answer a question that was routed to you. The answer is delivered back to the "
        "original asker."
    )
    Params = AnswerParams
    failures_are_results = True

    @classmethod
    def refusal_for(cls, agent, messages: list[Message]) -> str:
        return no_open_question(cls.name, "answer", agent, messages)

    def run(self, params: AnswerParams, ctx: ToolContext) -> str:
        questions.answer(team=ctx.team, key=params.query_id, answerer=ctx.agent, text=params.answer)
        return f"Answer delivered for query {params.query_id}."

    @classmethod
    def digest(cls, params: AnswerParams, result: ToolResult) -> str:
        query = Query.objects.filter(key=params.query_id).select_related("origin").first()
        asker = f" from {questions.asker(query)}" if query is not None else ""
        answer = _short(params.answer, DIGEST_TEXT_CHARS)
        return f'You answered {params.query_id}{asker}: "{answer}"'


class ForwardParams(Params):
    query_id: str = Field(
        min_length=1, max_length=SHORT_TEXT_LIMIT, description="The query ID to forward"
    )
    target: str | None = Field(
        default=None,
        max_length=SHORT_TEXT_LIMIT,
        description="Name of the agent to forward to. Omit to re-broadcast to everyone.",
    )
    enrichment: str = Field(
        min_length=1,
        max_length=HUMAN_TEXT_LIMIT,
        description="What you know about this question (added as context for the next agent)",
    )


@register
class PeerForwardQuestion(Tool):
    name = "peer_forward_question"
    description = (
        "Forward a question to another agent, adding your knowledge as enrichment context. "
        "Omit the target to re-broadcast it to the whole team."
    )
    Params = ForwardParams
    failures_are_results = True

    @classmethod
    def refusal_for(cls, agent, messages: list[Message]) -> str:
        return no_open_question(cls.name, "forward", agent, messages)

    def run(self, params: ForwardParams, ctx: ToolContext) -> str:
        questions.forward(
            team=ctx.team,
            key=params.query_id,
            forwarder=ctx.agent,
            target=params.target,
            enrichment=params.enrichment,
        )
        target = params.target.lstrip("@") if params.target else "all agents"
        return f"Question forwarded to {target} with enrichment."

    @classmethod
    def digest(cls, params: ForwardParams, result: ToolResult) -> str:
        target = params.target.lstrip("@") if params.target else "everyone"
        enrichment = _short(params.enrichment, DIGEST_TEXT_CHARS)
        return f'You forwarded {params.query_id} to {target} adding: "{enrichment}"'


def reply_hint(key: str) -> str:
    """How a recipient replies to a question it may still answer."""
    return (
        f'You can respond using {PeerAnswerQuestion.name} with query_id "{key}", or forward '
        f"the question ({PeerForwardQuestion.name}) to another agent if someone else is "
        "better suited to answer."
    )


def inbox_line(message: Message, agent) -> str | None:
    """What `agent` reads for an inbox message about a query, or None to leave it out
    of its context: a question only while the agent may still answer it (with the reply
    hint), an answer once, an expiry notice as it is."""
    if message.query_id is None:
        return message.content
    if message.kind == Message.Kind.QUERY:
        if not questions.open_for(message, agent):
            return None  # answered, expired, forwarded on or delivered again since
        return f"{message.content}\n\n{reply_hint(message.query.key)}"
    if message.kind == Message.Kind.ANSWER and not questions.first_answer(message):
        return None
    return message.content
