"""An agent's working notes as the live view shows them: the text it wrote beside its
tool calls in a turn, one paragraph per model response, under the turn's message.

The turn's message is the text of the response that ended it (teams.engine.loop);
a turn ended by a tool call (ask_pm, say) has that response's text as its message
too, so a paragraph the conversation already shows is left out here rather than
shown twice. Read in one query for every turn a page shows."""

from collections import defaultdict

from teams.models import Message, TurnStep


def _said(blocks: list[dict]) -> str:
    """A response's text, one paragraph per text block (as the turn's message is)."""
    return "\n\n".join(
        b["text"].strip()
        for b in blocks
        if b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"].strip()
    )


def _calls_a_tool(blocks: list[dict]) -> bool:
    return any(b.get("type") == "tool_use" for b in blocks)


def notes_by_turn(messages: list[Message]) -> dict[int, str]:
    """The working notes of the turns that wrote `messages`, by turn id (a turn
    without notes is absent)."""
    shown: dict[int, set[str]] = defaultdict(set)
    for message in messages:
        if message.turn_id:
            shown[message.turn_id].add(message.content.strip())
    steps = (
        TurnStep.objects.filter(turn_id__in=shown, kind=TurnStep.Kind.MODEL)
        .order_by("turn_id", "index")
        .values_list("turn_id", "content")
    )
    paragraphs: dict[int, list[str]] = defaultdict(list)
    for turn_id, blocks in steps:
        text = _said(blocks) if _calls_a_tool(blocks) else ""
        if text and text not in shown[turn_id]:
            paragraphs[turn_id].append(text)
    return {turn_id: "\n\n".join(texts) for turn_id, texts in paragraphs.items()}


def first_of_turn(messages: list[Message]) -> dict[int, int]:
    """The message each turn's notes go under: its first shown one (the agent's own
    words come before the record of a PM request)."""
    first: dict[int, int] = {}
    for message in messages:
        if message.turn_id:
            first.setdefault(message.turn_id, message.id)
    return first
