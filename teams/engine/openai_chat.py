"""The OpenAI-style provider: an agent's calls to any Chat Completions server (OpenAI,
Gemini's OpenAI-compatible endpoint, OpenRouter, Ollama, vLLM, llama.cpp) through the
official openai SDK, with its retries.

Loom's requests and replies are in the Messages API's shape (content blocks), so
this module translates both ways: the system blocks become the system message,
tool_use blocks an assistant message's `tool_calls`, tool_result blocks `tool`
messages (one per call, in the calls' order), tool definitions functions. A streamed
reply's tool calls are assembled across chunks by their index; `finish_reason` maps
to Loom's stop reasons; cached prompt tokens (`prompt_tokens_details.cached_tokens`)
are counted apart, at the cached price. A tool call whose arguments are not JSON
is kept with the raw text under INVALID_ARGUMENTS, so the loop answers it with an
"Error: ..." the model can correct; a reply cut off in a tool call, or one whose call
has no name, is a ModelError.

The SDK sends, retries and decodes the stream, but two of its conveniences are
skipped, which made a turn here cost up to 1.6x the CPU of a turn on Claude: the walk
of every request value against its types, growing with the history (the messages go
as they are, `untransformed`), and a pydantic model built per streamed chunk (the
chunks are read as the JSON they are)."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import urlsplit

import openai

from teams.engine.reply import DEFAULT_MAX_TOKENS, INVALID_ARGUMENTS, ModelReply
from teams.errors import ModelError
from teams.lib import endpoints, outbound
from teams.lib.catalog import Usage, price_problem
from teams.lib.endpoints import Endpoint
from teams.services import without_nul

# finish_reason -> Loom's (the Messages API's) stop reason.
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
# The hosts whose newer models take max_completion_tokens instead of max_tokens.
COMPLETION_TOKENS_HOSTS = {"api.openai.com"}


class OpenAIChatProvider:
    def __init__(self, client: openai.OpenAI, endpoint: Endpoint):
        self.client = client
        self.endpoint = endpoint

    def respond(
        self,
        *,
        model: str,
        system: list[dict],
        messages: list[dict],
        tools: list[dict],
        max_tokens: int = DEFAULT_MAX_TOKENS,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        unpriced = price_problem(model)
        if unpriced:
            raise ModelError(unpriced)
        kwargs = {
            "model": endpoints.route(model).model,
            self._tokens_parameter(): max_tokens,
            **untransformed(chat_messages(system, messages), [chat_tool(t) for t in tools]),
        }
        try:
            reply = self._call(kwargs, on_text)
        except openai.APIStatusError as exc:
            raise ModelError(self._status_error(exc)) from exc
        except openai.APIConnectionError as exc:
            refused = outbound.refusal_in(exc)
            if refused:
                raise ModelError(f"The endpoint's address is refused: {refused}") from exc
            raise ModelError(f"Could not reach the endpoint {self.endpoint.name!r}: {exc}") from exc
        except openai.APIError as exc:  # an error in the middle of a stream
            raise ModelError(f"The endpoint {self.endpoint.name!r} failed: {exc}") from exc
        return reply.as_model_reply(model)

    def _call(self, kwargs: dict, on_text: Callable[[str], None] | None) -> _Reply:
        completions = self.client.chat.completions
        if on_text is None:
            return _plain(completions.create(**kwargs).to_dict())
        # The stream's chunks as the JSON they are (Stream[object]): the SDK's own
        # Stream[ChatCompletionChunk] builds a pydantic model of each chunk through its
        # annotations, about 0.3 ms a chunk, and a server streams a chunk per token or
        # two. The SDK still decodes the events, raises an error event and closes.
        with completions.with_streaming_response.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        ) as response:
            return _streamed(response.parse(to=openai.Stream[object]), on_text)

    def _tokens_parameter(self) -> str:
        host = urlsplit(self.endpoint.base_url or "https://api.openai.com").hostname
        return "max_completion_tokens" if host in COMPLETION_TOKENS_HOSTS else "max_tokens"

    def _status_error(self, exc: openai.APIStatusError) -> str:
        detail = exc.message
        body = exc.body
        if isinstance(body, dict):
            error = body.get("error") if isinstance(body.get("error"), dict) else body
            detail = str(error.get("message") or detail)
        return f"The endpoint {self.endpoint.name!r} returned HTTP {exc.status_code}" + (
            f" ({detail[:300]})" if detail else ""
        )


# --- Loom's request as Chat Completions ------------------------------------------------


def untransformed(messages: list[dict], tools: list[dict]) -> dict:
    """create()'s arguments for the messages and tools, sent as they are.

    create() walks every value it is given against the SDK's TypedDicts before sending
    (`maybe_transform`, for key aliases and formats that Chat Completions' message and
    tool params do not have): on a long history that walk cost more CPU than the rest
    of the call and grew with every turn. Loom's messages are already the JSON to
    send, so they go in extra_body, which the SDK merges into the request over the
    named arguments without walking it (`messages` stays required by name: empty)."""
    body = {"messages": messages}
    if tools:
        body["tools"] = tools
    return {"messages": [], "extra_body": body}


def chat_tool(definition: dict) -> dict:
    """An Anthropic tool definition as a Chat Completions function (cache marks dropped)."""
    function = {"name": definition["name"], "parameters": definition.get("input_schema") or {}}
    if definition.get("description"):
        function["description"] = definition["description"]
    return {"type": "function", "function": function}


def chat_messages(system: list[dict] | str, messages: list[dict]) -> list[dict]:
    text = system if isinstance(system, str) else "\n\n".join(b.get("text", "") for b in system)
    out = [{"role": "system", "content": text}] if text else []
    for message in messages:
        if message["role"] == "assistant":
            out.append(_assistant(message["content"]))
        else:
            out.extend(_user(message["content"]))
    return out


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def _assistant(content) -> dict:
    message = {"role": "assistant", "content": _text_of(content) or None}
    calls = [b for b in content if b.get("type") == "tool_use"] if isinstance(content, list) else []
    if calls:
        message["tool_calls"] = [
            {
                "id": use["id"],
                "type": "function",
                "function": {"name": use["name"], "arguments": _arguments(use.get("input"))},
            }
            for use in calls
        ]
    return message


def _arguments(arguments) -> str:
    """A call's arguments as sent back: JSON always (a server may parse them again),
    an invalid call's raw text inside it."""
    if isinstance(arguments, dict) and INVALID_ARGUMENTS in arguments:
        return json.dumps({"invalid_arguments": arguments[INVALID_ARGUMENTS]})
    return json.dumps(arguments or {}, ensure_ascii=False)


def _user(content) -> list[dict]:
    """A user turn: its tool results first (a `tool` message each, answering the
    assistant's calls), then its text, if any."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out = [
        {
            "role": "tool",
            "tool_call_id": block["tool_use_id"],
            "content": _text_of(block.get("content")) or "(no output)",
        }
        for block in content
        if block.get("type") == "tool_result"
    ]
    text = _text_of(content)
    if text:
        out.append({"role": "user", "content": text})
    return out


# --- the reply back as Loom's -----------------------------------------------------------


class _Reply:
    """A reply being read (whole or chunk by chunk) into Loom's shape."""

    def __init__(self):
        self.text: list[str] = []
        self.calls: dict[int, dict] = {}  # index -> {"id", "name", "arguments"}
        self.finish_reason = ""
        self.usage = Usage()

    def add_call(self, index: int, call_id, name, arguments) -> None:
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        call["id"] = call_id or call["id"]
        if name and name != call["name"]:  # sent once, or (some servers) with every chunk
            call["name"] += name
        call["arguments"] += arguments or ""

    def read_usage(self, usage: dict | None) -> None:
        if usage is None:
            return
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        prompt = usage.get("prompt_tokens") or 0
        self.usage = Usage(
            input_tokens=max(prompt - cached, 0),
            output_tokens=usage.get("completion_tokens") or 0,
            cache_read_tokens=cached,
        )

    def as_model_reply(self, model: str) -> ModelReply:
        content = [{"type": "text", "text": "".join(self.text)}] if "".join(self.text) else []
        if self.calls and self.finish_reason == "length":
            raise ModelError(
                "The model's reply was cut off in the middle of a tool call (it reached "
                "its output token limit); nothing was run"
            )
        for index in sorted(self.calls):
            content.append(_tool_use(self.calls[index], index))
        stop = STOP_REASONS.get(self.finish_reason, "end_turn")
        if self.calls:  # some servers say "stop" for a reply that calls tools
            stop = "tool_use"
        return ModelReply(
            content=[without_nul(block) for block in content],
            stop_reason=stop,
            model=model,  # priced by Loom's id: the endpoint's model names are its own
            usage=self.usage,
        )


def _tool_use(call: dict, index: int) -> dict:
    if not call["name"]:
        raise ModelError("The model's reply has a tool call without a tool name; nothing was run")
    try:
        arguments = json.loads(call["arguments"] or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("not an object")
    except ValueError:
        arguments = {INVALID_ARGUMENTS: call["arguments"]}
    return {
        "type": "tool_use",
        "id": call["id"] or f"call_{index}",
        "name": call["name"],
        "input": arguments,
    }


# A reply is read as the JSON the server sent (dicts), whole or chunk by chunk.


def _plain(completion: dict) -> _Reply:
    reply = _Reply()
    reply.read_usage(completion.get("usage"))
    if not completion.get("choices"):
        return reply
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    reply.finish_reason = choice.get("finish_reason") or ""
    if message.get("content"):
        reply.text.append(message["content"])
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        reply.add_call(index, call.get("id"), function.get("name"), function.get("arguments"))
    return reply


def _streamed(stream, on_text: Callable[[str], None]) -> _Reply:
    reply = _Reply()
    with stream:
        for chunk in stream:
            reply.read_usage(chunk.get("usage"))
            if chunk.get("choices"):
                _read_choice(reply, chunk["choices"][0], on_text)
    return reply


def _read_choice(reply: _Reply, choice: dict, on_text: Callable[[str], None]) -> None:
    delta = choice.get("delta") or {}
    if delta.get("content"):
        reply.text.append(delta["content"])
        on_text(delta["content"])
    # A call's pieces are matched by their index; a server that leaves it out sends
    # each call whole, in order.
    for position, call in enumerate(delta.get("tool_calls") or []):
        function = call.get("function") or {}
        reply.add_call(
            call.get("index", position),
            call.get("id"),
            function.get("name"),
            function.get("arguments"),
        )
    if choice.get("finish_reason"):
        reply.finish_reason = choice["finish_reason"]
