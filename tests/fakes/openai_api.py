"""A local HTTP server that speaks enough of OpenAI's Chat Completions API for the
real openai SDK (any OpenAI-compatible vendor: GPT, Gemini's endpoint, vLLM,
Ollama): JSON completions with usage, finish reasons, error bodies, and a delay.
Every request is recorded so tests assert on what was sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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


class FakeOpenAI:
    def __init__(self, script: list | Callable[[Request], Completion | Error]):
        self.script = script
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def reply_to(self, request: Request):
        with self.lock:
            self.requests.append(request)
            if callable(self.script):
                return self.script(request)
            return self.script.pop(0) if self.script else Error(500, "script ran out")

    def _handler(self):
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
