"""The requests a model received, kept with each model step (TurnStep.request) so
people read exactly what the model read: `manage.py team prompt` and the admin's
turn page show them.

A request is stored as zlib-compressed JSON of {model, max_tokens, system, messages,
tools}; its history repeats from one step to the next, so it compresses well (about
a tenth of its size)."""

from __future__ import annotations

import hashlib
import json
import zlib

from teams.errors import NotFound
from teams.models import Team, Turn, TurnStep

# zlib's fastest level: a 72 KB request packs in 0.11 ms instead of 0.24 ms (level 6),
# 7% larger. Every model call packs its request, and it grows with the history.
LEVEL = 1


def request_pack(request: dict) -> bytes:
    return request_packed(request)[0]


def request_digest(request: dict) -> str:
    """The SHA-256 of what a request shows the model: its system, messages and the
    tools offered (model and max_tokens aside), as canonical JSON."""
    shown = {key: request.get(key) for key in SHOWN}
    text = json.dumps(shown, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


SHOWN = ("messages", "system", "tools")  # in canonical JSON's (sorted) order


def request_packed(request: dict) -> tuple[bytes, str]:
    """(request_pack, request_digest) of a request, its large parts encoded once: the
    stored copy is the same canonical JSON the digest is taken of."""
    parts = {
        key: _messages_json(value) if key == "messages" else _canonical(value)
        for key, value in request.items()
    }
    shown = ",".join(f"{json.dumps(key)}:{parts.get(key, 'null')}" for key in SHOWN)
    digest = hashlib.sha256(("{" + shown + "}").encode()).hexdigest()
    text = "{" + ",".join(f"{json.dumps(key)}:{parts[key]}" for key in sorted(parts)) + "}"
    return zlib.compress(text.encode(), LEVEL), digest


_encoder = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _canonical(value) -> str:
    """Canonical JSON (the digest's): sorted keys, no spaces, non-ASCII as it is."""
    return _encoder.encode(value)


# The canonical JSON of a text block, by its text: a history's blocks come again in every
# request of the agent's, as the same string objects (their hash computed once), so
# each is encoded once, not once a turn. Emptied when full (texts of older turns).
_text_blocks: dict[str, str] = {}
_ROLES = {"user": '"user"', "assistant": '"assistant"'}
TEXT_BLOCKS_KEPT = 50_000


def _messages_json(messages) -> str:
    """_canonical(messages), byte for byte, with each plain text block encoded once."""
    if not isinstance(messages, list):
        return _canonical(messages)
    kept = _text_blocks
    parts = []
    for message in messages:
        content = message.get("content") if type(message) is dict else None
        role = _ROLES.get(message.get("role")) if type(content) is list else None
        if role is None or len(message) != 2:
            parts.append(_canonical(message))
            continue
        blocks = []
        for block in content:
            plain = type(block) is dict and len(block) == 2 and block.get("type") == "text"
            text = block.get("text") if plain else None
            encoded = kept.get(text) if type(text) is str else None
            if encoded is None:
                encoded = _block_json(block)
            blocks.append(encoded)
        parts.append(f'{{"content":[{",".join(blocks)}],"role":{role}}}')
    return f"[{','.join(parts)}]"


def _block_json(block) -> str:
    """A block's canonical JSON, kept when it is a plain text block."""
    if type(block) is not dict or len(block) != 2 or block.get("type") != "text":
        return _canonical(block)
    text = block.get("text")
    if type(text) is not str:
        return _canonical(block)
    if len(_text_blocks) >= TEXT_BLOCKS_KEPT:
        _text_blocks.clear()
    encoded = _text_blocks[text] = f'{{"text":{_canonical(text)},"type":"text"}}'
    return encoded


def request_unpack(blob: bytes | memoryview | None) -> dict | None:
    if blob is None:
        return None
    return json.loads(zlib.decompress(bytes(blob)))


def turn_requests(turn: Turn) -> list[dict]:
    """The requests of a turn's model calls, in order (the ones it recorded)."""
    blobs = turn.steps.filter(kind=TurnStep.Kind.MODEL, request__isnull=False).order_by("index")
    return [request_unpack(blob) for blob in blobs.values_list("request", flat=True)]


def turn_working_notes(turn: Turn) -> str:
    """The text the agent wrote beside its tool calls in a turn, one paragraph per
    response: its working notes, which the conversation does not repeat (the turn's
    message is the text of the response that ended it)."""
    steps = turn.steps.filter(kind=TurnStep.Kind.MODEL).order_by("index")
    notes = []
    for step in steps.values_list("content", flat=True):
        if not any(block.get("type") == "tool_use" for block in step):
            continue
        text = "\n\n".join(
            b["text"].strip() for b in step if b.get("type") == "text" and b["text"].strip()
        )
        if text:
            notes.append(text)
    return "\n\n".join(notes)


def agent_turn(*, team: Team, agent_name: str, number: int | None = None) -> Turn:
    """An agent's turn by the team's turn number, or its latest with a recorded
    request."""
    agent = team.agents.filter(name=agent_name).first()
    if agent is None:
        names = ", ".join(team.agents.values_list("name", flat=True))
        raise NotFound(f"No agent named {agent_name!r} in team {team.slug!r}. Agents: {names}.")
    turns = Turn.objects.filter(team=team, agent=agent)
    if number is not None:
        turn = turns.filter(number=number).order_by("-id").first()
        if turn is None:
            raise NotFound(f"{agent.name} has no turn number {number} in team {team.slug!r}.")
        return turn
    turn = turns.filter(steps__request__isnull=False).order_by("-id").first()
    if turn is None:
        raise NotFound(f"{agent.name} has no turn with a recorded request yet.")
    return turn


def _content_text(content) -> str:
    """Content blocks (or a plain string) as readable text."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            parts.append(block.get("text", ""))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False, indent=2)
            parts.append(f"[tool call {block.get('name')} id={block.get('id')}]\n{arguments}")
        elif kind == "tool_result":
            error = " (error)" if block.get("is_error") else ""
            body = _content_text(block.get("content") or "")
            parts.append(f"[tool result id={block.get('tool_use_id')}{error}]\n{body}")
        else:
            parts.append(json.dumps(block, ensure_ascii=False))
    return "\n\n".join(parts)


def request_text(request: dict) -> str:
    """A request as a person reads it: system, messages, then the tools offered."""
    rule = "=" * 72
    lines = [f"model: {request.get('model')}  max_tokens: {request.get('max_tokens')}"]
    lines += [rule, "SYSTEM", rule]
    lines += [_content_text([block]) for block in request.get("system", [])]
    for message in request.get("messages", []):
        lines += [rule, message["role"].upper(), rule, _content_text(message["content"])]
    tools = request.get("tools", [])
    lines += [rule, f"TOOLS ({len(tools)})", rule]
    for tool in tools:
        schema = json.dumps(tool.get("input_schema", {}), ensure_ascii=False)
        lines += [f"- {tool['name']}: {tool.get('description', '')}", f"  schema: {schema}"]
    return "\n".join(lines)
