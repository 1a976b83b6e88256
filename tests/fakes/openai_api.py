"""A local HTTP server that speaks enough of OpenAI's Chat Completions API for the
real openai SDK (any OpenAI-compatible vendor: GPT, Gemini's endpoint, vLLM,
Ollama): JSON completions with usage, finish reasons, error bodies, and a delay.
Every request is recorded so tests assert on what was sent."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from tests.fakes.server import LocalServer


@dataclass
class Completion:
    content: str
    finish_reason: str = "stop"
    prompt_tokens: int = 120
    completion_tokens: int = 60
    delay: float = 0.0


@dataclass
class Error:
    status: int
    message: str


@dataclass
class Request:
    path: str
    headers: dict
    body: dict


class FakeOpenAI(LocalServer):
    """`with FakeOpenAI(script) as api:`; api.url is the base URL (with /v1)."""

    path_prefix = "/v1"

    def reply_to(self, request: Request):
        with self.lock:
            self.requests.append(request)
            if callable(self.script):
                return self.script(request)
            return self.script.pop(0) if self.script else Error(500, "script ran out")

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
                if getattr(reply, "delay", 0):
                    time.sleep(reply.delay)
                if isinstance(reply, Error):
                    return self._json(reply.status, {"error": {"message": reply.message}})
                self._json(
                    200,
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "gpt-test"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply.content},
                                "finish_reason": reply.finish_reason,
                            }
                        ],
                        "usage": {
                            "prompt_tokens": reply.prompt_tokens,
                            "completion_tokens": reply.completion_tokens,
                            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                        },
                    },
                )

            def _json(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
