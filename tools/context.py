"""Context tools (seed 000/001): offload old context to a keeper, retrieve it later."""

from typing import Literal

from pydantic import Field

from teams import keepers
from tools.base import Params, Tool, ToolContext
from tools.registry import register


class RetrieveParams(Params):
    query: str = Field(min_length=1, description="The question or search term")
    keeper_id: int | None = Field(
        default=None, description="Specific keeper ID to query. Omit to search all keepers."
    )
    mode: Literal["smart", "raw"] | None = Field(
        default=None,
        description=(
            "Retrieval mode: 'smart' (focused LLM answer) or 'raw' (matching messages). "
            "Auto-detected if omitted."
        ),
    )


@register
class ContextRetrieve(Tool):
    name = "context_retrieve"
    description = (
        "Retrieve context from team keepers. Use to recall offloaded conversation history, "
        "find decisions made earlier, or answer questions about past work. Defaults to "
        "smart mode (LLM-summarized answer) for questions, raw mode for keyword lookups."
    )
    Params = RetrieveParams
    failures_are_results = True
    calls_model = True

    def run(self, params: RetrieveParams, ctx: ToolContext) -> str:
        return keepers.retrieve(
            team=ctx.team,
            query=params.query,
            keeper_id=params.keeper_id,
            mode=params.mode,
            ask_model=ctx.ask_model,
        )


class OffloadParams(Params):
    topic: str = Field(
        min_length=1,
        description=(
            "Short label describing the offloaded context (e.g. 'auth implementation', "
            "'database schema decisions')"
        ),
    )
    message_count: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Number of oldest messages to offload. Defaults to automatic detection (oldest "
            "30% at a topic boundary)."
        ),
    )


@register
class ContextOffload(Tool):
    name = "context_offload"
    description = (
        "Offload a chunk of your conversation context to a keeper. Use when you've "
        "accumulated extensive context on a topic and want to free up your context window "
        "while preserving the information for later retrieval. The offloaded context "
        "remains queryable via context_retrieve."
    )
    Params = OffloadParams

    def run(self, params: OffloadParams, ctx: ToolContext) -> str:
        # The loop's own snapshot: no call back into the running agent (seed 001's deadlock).
        messages = list(ctx.messages)
        if params.message_count:
            chunk = messages[: params.message_count]
        else:
            chunk, _rest = keepers.split_at_topic_boundary(messages)
        if len(chunk) < keepers.MIN_MESSAGES_TO_OFFLOAD and not params.message_count:
            return "No messages to offload (context too small)."
        if not chunk:
            return "No messages to offload (context too small)."
        result = keepers.offload(agent=ctx.agent, messages=chunk, topic=params.topic)
        # Offloaded messages also leave the rest of this turn's snapshot.
        offloaded = {m.id for m in chunk}
        ctx.messages[:] = [m for m in ctx.messages if m.id not in offloaded]
        return (
            f"Offloaded {result.count} messages. {result.keeper.index_entry} {recall_hint(result)}"
        )


def recall_hint(offload: keepers.Offload) -> str:
    """How an agent gets offloaded messages back (also used by the automatic offload)."""
    return f'Recall with {ContextRetrieve.name}(query, keeper_id="{offload.keeper.id}").'
