"""What the fake vendor APIs share: a local threaded HTTP server on a free port,
started and stopped as a context manager, recording every request it is sent."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

# serve_forever notices shutdown() only at its next poll (every 0.5 s by default): a
# fake stopped after each test cost the suite that much per test. 10 ms stops it at once.
POLL_SECONDS = 0.01


def serving_thread(server) -> threading.Thread:
    """A daemon thread that serves `server` until `server.shutdown()`."""
    return threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True
    )


class LocalServer:
    """Subclasses give `_handler_class()`; `url` is where the SDK is pointed."""

    path_prefix = ""

    def __init__(self, script):
        self.script = script if script is not None else []
        self.requests: list = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.thread = serving_thread(self.server)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}{self.path_prefix}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _handler_class(self):  # pragma: no cover - interface
        raise NotImplementedError
