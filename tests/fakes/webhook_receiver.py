"""A webhook receiver on loopback, as a PM's server would be: it checks each
delivery's X-Loom-Signature with the webhook's secret, records what it got, and
answers as its script says (a status, or a delay past the sender's timeout)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from tests.fakes.server import LocalServer, wait_before_answering


@dataclass
class Delivered:
    headers: dict
    raw: bytes
    signature_ok: bool
    at: float

    @property
    def body(self) -> dict:
        return json.loads(self.raw)

    @property
    def event(self) -> str:
        return self.headers.get("X-Loom-Event", "")

    @property
    def delivery_id(self) -> str:
        return self.headers.get("X-Loom-Delivery", "")


@dataclass
class Answer:
    status: int = 200
    delay: float = 0.0  # seconds to wait before answering
    gate: Callable[[], object] | None = None  # called before answering (a Barrier's wait)


def verify(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does: recompute the HMAC of the raw body, compare in constant time."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header or "")


class WebhookReceiver(LocalServer):
    """`with WebhookReceiver([Answer(500), Answer(500)]) as hook:` then set
    `hook.secret`; once the script runs out it answers 200. A request whose
    signature does not verify is refused with 401 (and recorded)."""

    def __init__(self, script: list[Answer] | None = None, secret: str = ""):
        super().__init__(script)
        self.secret = secret

    def next_answer(self, request: Delivered) -> Answer:
        with self.lock:
            self.requests.append(request)
            return self.script.pop(0) if self.script else Answer()

    @property
    def verified(self) -> list[Delivered]:
        return [r for r in self.requests if r.signature_ok]

    def _handler_class(self):
        hook = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                signature = self.headers.get("X-Loom-Signature", "")
                request = Delivered(
                    dict(self.headers.items()),
                    raw,
                    bool(hook.secret) and verify(hook.secret, raw, signature),
                    time.monotonic(),
                )
                answer = hook.next_answer(request)
                wait_before_answering(answer)
                status = answer.status if request.signature_ok else 401
                text = b"ok" if status < 300 else b"receiver says no"
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                except OSError:  # the sender gave up waiting
                    pass

        return Handler
