"""Question tools (seed 000): ask, answer and forward questions between agents."""

from pydantic import Field

from teams import questions
from tools.base import Params, Tool, ToolContext
from tools.registry import register


class AskParams(Params):
    question: str = Field(min_length=1, description="The question to ask")
    target: str | None = Field(
        default=None, description="Name of a specific agent to ask. Omit to broadcast to all."
    )
    context: str | None = Field(
        default=None, description="Additional context relevant to the question"
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


class AnswerParams(Params):
    query_id: str = Field(min_length=1, description="The query ID from the question you received")
    answer: str = Field(min_length=1, description="Your answer to the question")


@register
class PeerAnswerQuestion(Tool):
    name = "peer_answer_question"
    description = (
        "Answer a question that was routed to you. The answer is delivered back to the "
        "original asker."
    )
    Params = AnswerParams
    failures_are_results = True

    def run(self, params: AnswerParams, ctx: ToolContext) -> str:
        questions.answer(team=ctx.team, key=params.query_id, answerer=ctx.agent, text=params.answer)
        return f"Answer delivered for query {params.query_id}."


class ForwardParams(Params):
    query_id: str = Field(min_length=1, description="The query ID to forward")
    target: str | None = Field(
        default=None,
        description="Name of the agent to forward to. Omit to re-broadcast to everyone.",
    )
    enrichment: str = Field(
        min_length=1,
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


def inbox_line(message, agent) -> str | None:
    """The text an agent reads for an inbox message about a query (placeholder until
    the question routing rework lands: the question with seed 000's reply hint)."""
    if message.kind == message.Kind.QUERY:
        key = message.query.key if message.query_id else "?"
        return (
            f"{message.content}\n\nYou can respond using {PeerAnswerQuestion.name} with "
            f'query_id "{key}", or forward the question ({PeerForwardQuestion.name}) to '
            "another agent if someone else is better suited to answer."
        )
    return message.content
