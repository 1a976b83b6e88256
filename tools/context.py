"""Context tools: offload old context to a keeper, retrieve it later.

context_offload moves the oldest messages of the agent's own snapshot into a
topic-labelled keeper (teams.conversation.keepers.offload), which leaves one stub line in the
agent's history saying what went where and how to recall it; context_retrieve reads
keepers back (raw lines or a focused answer)."""

from typing import Literal

from pydantic import Field

from teams.conversation import keepers
from teams.models import Keeper
from tools.base import Params, Tool, ToolContext, ToolResult, _short
from tools.registry import register


class RetrieveParams(Params):
    query: str = Field(
        min_length=1,
        max_length=keepers.MAX_QUERY_CHARS,
        description="The question or search term",
    )
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
    writes = False
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
            viewer=ctx.agent,  # its own keepers, and the team conversation's lines in any
        )

    @classmethod
    def digest(cls, params: RetrieveParams, result: ToolResult) -> str:
        """What was looked up and whether anything came back, not the text itself: the
        agent calls again to read it (a record repeating it would pay for it twice)."""
        where = f"keeper {params.keeper_id}" if params.keeper_id is not None else "the keepers"
        asked = f'You searched {where} for "{_short(params.query, 80)}"'
        text = result.text
        if result.is_error or text.startswith(("No relevant context found", "Keeper ")):
            return f"{asked}: {_short(text, 120)}"
        lines = sum(1 for line in text.splitlines() if line.strip())
        found = f"{lines} matching lines" if text.startswith("[") else "an answer"
        # Words, not characters: the size of an answer citing keeper and message ids
        # stays the same in a replay or a fork, whose rows have other ids.
        return f"{asked}: got {found} ({len(text.split()):,} words)."


class OffloadParams(Params):
    topic: str = Field(
        min_length=1,
        max_length=Keeper._meta.get_field("topic").max_length,
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
        # The loop's own snapshot: no call back into the running agent, which would wait
        # on itself.
        messages = list(ctx.messages)
        if params.message_count:
            chunk = messages[: params.message_count]
        else:
            chunk, _rest = keepers.split_at_topic_boundary(messages)
        if len(chunk) < keepers.MIN_MESSAGES_TO_OFFLOAD and not params.message_count:
            return "No messages to offload (context too small)."
        if not chunk:
            return "No messages to offload (context too small)."
        result = keepers.offload(
            agent=ctx.agent,
            messages=chunk,
            topic=params.topic,
            retrieve_tool=ContextRetrieve.name,
            turn=ctx.turn,
        )
        # Offloaded messages also leave the rest of this turn's snapshot.
        offloaded = {m.id for m in chunk}
        ctx.messages[:] = [m for m in ctx.messages if m.id not in offloaded]
        return (
            f"Offloaded {result.count} messages. {result.keeper.index_entry} {recall_hint(result)}"
        )

    @classmethod
    def digest(cls, params: OffloadParams, result: ToolResult) -> str:
        """None for an offload made: its stub line (keepers.stub_text) is the one record
        in the agent's history. A refused one is recorded as such."""
        if result.text.startswith("Offloaded "):
            return ""
        return f'You tried to offload context as "{_short(params.topic, 60)}": ' + _short(
            result.text, 120
        )


def recall_hint(offload: keepers.Offload) -> str:
    """How an agent gets offloaded messages back."""
    return f"Recall with {ContextRetrieve.name}(query, keeper_id={offload.keeper.id})."
