"""A local HTTP server that speaks enough of OpenAI's Chat Completions API for the
real openai SDK (any OpenAI-compatible vendor: GPT, Gemini's endpoint, vLLM,
Ollama): completions with text and tool calls, plain (JSON) or streamed (server-sent
events, as `stream: true` asks: text in pieces, each tool call's arguments split
across `arguments_chunks` chunks, usage in the last chunk), usage with cached prompt
tokens, finish reasons, error bodies, an error event in a stream, and a delay. Every
request is recorded so tests assert on what was sent."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.fakes.server import NO_REPLY, LocalServer, wait_before_answering


@dataclass
class ToolCall:
    name: str
    arguments: str  # as the model wrote it: JSON, or not
    id: str = ""


@dataclass
class Completion:
    content: str = ""
    finish_reason: str = ""  # empty: "tool_calls" when it calls tools, else "stop"
    prompt_tokens: int = 120
    completion_tokens: int = 60
    delay: float = 0.0
    gate: Callable[[], object] | None = None  # called before answering (a Barrier's wait)
    tool_calls: list[ToolCall] = field(default_factory=list)
    cached_tokens: int = 0
    arguments_chunks: int = 1  # a streamed call's arguments arrive in this many pieces
    stream_error: str = ""  # streamed: an error event with this message after the text

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    def usage(self) -> dict:
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage

    def calls(self) -> list[dict]:
        return [
            {
                "id": call.id or f"call_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for index, call in enumerate(self.tool_calls)
        ]


@dataclass
class Error:
    status: int
    message: str


@dataclass
class Request:
    path: str
    headers: dict
    body: dict

    @property
    def agent(self) -> str:
        """The agent asking: the name its system message gives ("Your name is X ...")."""
        system = next((m for m in self.body.get("messages", []) if m["role"] == "system"), None)
        marker = "Your name is "
        if system is None or marker not in (system.get("content") or ""):
            return ""
        return system["content"].split(marker, 1)[1].split(" ", 1)[0]

    @property
    def answers_tools(self) -> bool:
        """Does the request end with tool results (the model's reply is to read them)?"""
        messages = self.body.get("messages", [])
        return (
            bool(messages)
            and messages[-1]["role"] in ("tool", "user")
            and any(m["role"] == "tool" for m in messages[-3:])
        )


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // max(count, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def stream_chunks(reply: Completion, model: str) -> list[dict]:
    """The chunks of a streamed reply, as the API sends them."""

    def chunk(delta: dict, finish=None) -> dict:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in _pieces(reply.content, 3) if piece]
    if reply.stream_error:  # as OpenAI sends a failure after the stream began
        return chunks + [{"error": {"message": reply.stream_error, "type": "server_error"}}]
    for index, call in enumerate(reply.calls()):
        head = {"index": index, "id": call["id"], "type": "function"}
        head["function"] = {"name": call["function"]["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [head]}))
        for piece in _pieces(call["function"]["arguments"], reply.arguments_chunks):
            part = {"index": index, "function": {"arguments": piece}}
            chunks.append(chunk({"tool_calls": [part]}))
    chunks.append(chunk({}, reply.finish))
    last = chunk({})
    last["choices"], last["usage"] = [], reply.usage()
    return chunks + [last]


class FakeOpenAI(LocalServer):
    """`with FakeOpenAI(script) as api:`; api.url is the base URL (with /v1). The script
    is a list of Completion and Error, or a function of the Request."""

    path_prefix = "/v1"

    def reply_to(self, request: Request):
        with self.lock:
            self.requests.append(request)
            reply = self.script_next(request)
        return Error(400, NO_REPLY) if reply is None else reply

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                request = Request(self.path, dict(self.headers.items()), body)
                if not self.path.endswith("/chat/completions"):
                    return self._json(404, {"error": {"message": self.path}})
                reply = fake.reply_to(request)
                wait_before_answering(reply)
                if isinstance(reply, Error):
                    return self._json(reply.status, {"error": {"message": reply.message}})
                model = body.get("model", "gpt-test")
                if body.get("stream"):
                    return self._events(stream_chunks(reply, model))
                message = {"role": "assistant", "content": reply.content or None}
                if reply.tool_calls:
                    message["tool_calls"] = reply.calls()
                self._json(
                    200,
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": model,
                        "choices": [
                            {"index": 0, "message": message, "finish_reason": reply.finish}
                        ],
                        "usage": reply.usage(),
                    },
                )

            def _events(self, chunks: list[dict]):
                data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                encoded = data.encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(encoded)))
                self.end_headers()
                self.wfile.write(encoded)

            def _json(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
