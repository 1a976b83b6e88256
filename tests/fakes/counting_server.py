"""A loopback HTTP server that only counts what it is asked and answers a JSON schema,
standing in for a cloud metadata address or any URL Loom must never fetch."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

from tests.fakes.server import LocalServer


class CountingServer(LocalServer):
    """`with CountingServer() as target:` then `target.url`; `target.requests` holds
    the path of every request it got."""

    def __init__(self):
        super().__init__([])

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                with fake.lock:
                    fake.requests.append(self.path)
                body = b'{"type": "string", "description": "from the metadata server"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815 - http.server's name

            def log_message(self, *args):
                pass

        return Handler
