"""A local HTTP server that speaks enough of the Anthropic Messages API for the real
anthropic client: streamed (SSE) and plain responses with text and tool_use blocks,
usage with cache fields, and error bodies (400, 429, 529) with retry headers.

Every request is recorded (headers and JSON body) so tests assert on what the
model was really sent.

Token counting (opt-in: `FakeMessagesAPI(script, count_tokens=True)`) reports the
usage the real API would instead of the script's fixed figures; see PromptCache."""

from __future__ import annotations

import hashlib
import json
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.fakes.server import NO_REPLY, LocalServer, wait_before_answering


@dataclass
class Reply:
    content: list[dict]
    stop_reason: str = "end_turn"
    input_tokens: int = 100
    output_tokens: int = 20
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    delay: float = 0.0  # seconds the server waits before answering
    gate: Callable[[], object] | None = None  # called before answering (a Barrier's wait)


@dataclass
class Failure:
    status: int
    error_type: str
    message: str
    headers: dict = field(default_factory=dict)


@dataclass
class Reset:
    """The connection is reset (RST) instead of answered."""


def text(value: str, **usage) -> Reply:
    return Reply([{"type": "text", "text": value}], **usage)


def tool(name: str, arguments: dict, call_id: str | None = None, say: str = "", **usage):
    blocks = [{"type": "text", "text": say}] if say else []
    blocks.append(
        {
            "type": "tool_use",
            "id": call_id or f"toolu_{name}_{id(arguments):x}",
            "name": name,
            "input": arguments,
        }
    )
    return Reply(blocks, stop_reason="tool_use", **usage)


def overloaded() -> Failure:
    return Failure(529, "overloaded_error", "Overloaded", {"retry-after-ms": "5"})


def rate_limited() -> Failure:
    return Failure(429, "rate_limit_error", "Slow down", {"retry-after-ms": "5"})


def bad_request(message: str = "messages: invalid request") -> Failure:
    return Failure(400, "invalid_request_error", message)


@dataclass
class Recorded:
    path: str
    headers: dict
    body: dict
    usage: dict | None = None  # what a counting server reported for it

    @property
    def breakpoints(self) -> list[str]:
        """Where the request's cache_control markers sit, in prefix order: "tools[i]",
        "system[i]", "messages[i][j]" (a string content is messages[i][0])."""
        return [where for where, _, marked in _pieces(self.body) if marked]

    @property
    def system_text(self) -> str:
        system = self.body.get("system") or []
        if isinstance(system, str):
            return system
        return "\n".join(block.get("text", "") for block in system)

    @property
    def tool_names(self) -> list[str]:
        return [t["name"] for t in self.body.get("tools", [])]

    @property
    def dump(self) -> str:
        return json.dumps(self.body)

    @property
    def agent(self) -> str:
        marker = "Your name is "
        text_ = self.system_text
        if marker not in text_:
            return ""
        return text_.split(marker, 1)[1].split(" ", 1)[0]


def tokens(text: str) -> int:
    """The fake's tokenizer: one token per four characters, rounded up."""
    return -(-len(text) // 4)


def _pieces(body: dict):
    """(where, canonical text, marked) of each cacheable unit of a request, in the
    order the API caches a prefix: every tool definition, every system block, every
    content block of every message (a string content is one block). The text is the
    unit's compact JSON without its cache_control marker (a marker is not content);
    a message block carries its role."""

    def canon(item: dict) -> str:
        return json.dumps(
            {k: v for k, v in item.items() if k != "cache_control"},
            sort_keys=True,
            separators=(",", ":"),
        )

    for i, tool_ in enumerate(body.get("tools") or []):
        yield f"tools[{i}]", canon(tool_), "cache_control" in tool_
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for i, block in enumerate(system):
        yield f"system[{i}]", canon(block), "cache_control" in block
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for j, block in enumerate(content or []):
            where = f"messages[{i}][{j}]"
            yield where, canon({"role": message.get("role"), **block}), "cache_control" in block


class PromptCache:
    """Counts a request's input as the real Messages API reports it.

    Tokens: `tokens()` (characters / 4, rounded up) of each unit's compact JSON
    (`_pieces`: tools, then system, then messages), summed; output tokens the same
    way over the reply's content blocks. A prefix is everything up to and including
    a block marked with cache_control, keyed by the model and its exact text. The
    longest marked prefix seen before is a cache read (cache_read_input_tokens);
    from there to the last marked block is a cache write (cache_creation_input_
    tokens), and every marked prefix is remembered; what follows the last marker is
    plain input (input_tokens). A prefix shorter than `min_tokens` is not cached (the
    real API's minimum is 1024 tokens for Sonnet and Opus). No expiry: entries live
    for the server's life (the real cache's five minutes outlast a bench)."""

    def __init__(self, min_tokens: int = 0):
        self.min_tokens = min_tokens
        self.seen: set[str] = set()

    def usage(self, body: dict) -> dict:
        digest = hashlib.sha256(str(body.get("model", "")).encode())
        total, marked = 0, []  # marked: (prefix tokens, prefix key)
        for _, text_, is_marked in _pieces(body):
            total += tokens(text_)
            digest.update(text_.encode() + b"\0")
            if is_marked and total >= self.min_tokens:
                marked.append((total, digest.hexdigest()))
        read = max((size for size, key in marked if key in self.seen), default=0)
        cached = max((size for size, _ in marked), default=0)
        self.seen.update(key for _, key in marked)
        return {
            "input_tokens": total - cached,
            "cache_creation_input_tokens": cached - read,
            "cache_read_input_tokens": read,
        }


class FakeMessagesAPI(LocalServer):
    """Start with `with FakeMessagesAPI(script) as api:`; api.url is the base URL.

    The script is a list of Reply/Failure served in order, or a callable taking the
    Recorded request and returning one. With count_tokens=True the usage a reply
    reports is counted from the request (PromptCache; min_cache_tokens is the
    shortest prefix it caches) instead of the Reply's fixed figures, and each
    Recorded request keeps it (`usage`)."""

    def __init__(
        self,
        script: list | Callable[[Recorded], Reply | Failure] | None = None,
        *,
        count_tokens: bool = False,
        min_cache_tokens: int = 0,
    ):
        super().__init__(script)
        self._counter = 0
        self.cache = PromptCache(min_cache_tokens) if count_tokens else None

    def usage_of(self, request: Recorded, reply: Reply) -> dict:
        """The usage a reply reports: the script's, or counted from the request."""
        if self.cache is None:
            return {
                "input_tokens": reply.input_tokens,
                "output_tokens": reply.output_tokens,
                "cache_creation_input_tokens": reply.cache_creation_input_tokens,
                "cache_read_input_tokens": reply.cache_read_input_tokens,
            }
        with self.lock:
            usage = self.cache.usage(request.body)
        output = sum(tokens(json.dumps(b, separators=(",", ":"))) for b in reply.content)
        request.usage = {**usage, "output_tokens": output}
        return request.usage

    def next_reply(self, request: Recorded):
        with self.lock:
            self.requests.append(request)
            self._counter += 1
            reply = self.script_next(request)
        if reply is None:
            return Failure(400, "invalid_request_error", NO_REPLY)
        return reply

    def _handler_class(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                recorded = Recorded(self.path, dict(self.headers.items()), body)
                if not self.path.startswith("/v1/messages"):
                    return self._json(
                        404,
                        {
                            "type": "error",
                            "error": {"type": "not_found_error", "message": self.path},
                        },
                    )
                reply = api.next_reply(recorded)
                wait_before_answering(reply)
                if isinstance(reply, Reset):
                    linger = struct.pack("ii", 1, 0)  # close with RST, not FIN
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    self.close_connection = True
                    self.connection.close()
                    return None
                if isinstance(reply, Failure):
                    return self._json(
                        reply.status,
                        {
                            "type": "error",
                            "error": {"type": reply.error_type, "message": reply.message},
                        },
                        reply.headers,
                    )
                message = {
                    "id": f"msg_{api._counter:04d}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "claude-test"),
                    "content": reply.content,
                    "stop_reason": reply.stop_reason,
                    "stop_sequence": None,
                    "usage": api.usage_of(recorded, reply),
                }
                if body.get("stream"):
                    return self._stream(message)
                return self._json(200, message)

            def _json(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message):
                events = list(_sse_events(message))
                data = "".join(
                    f"event: {name}\ndata: {json.dumps(payload)}\n\n" for name, payload in events
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _sse_events(message: dict):
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {**message["usage"], "output_tokens": 1},
    }
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            words = block["text"].split(" ")
            for i in range(0, len(words), 3):
                chunk = " ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "")
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": chunk},
                    },
                )
        else:
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    },
                },
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(block["input"]),
                    },
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}
