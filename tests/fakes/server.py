"""What the fake vendor APIs share: a local threaded HTTP server on a free port,
started and stopped as a context manager, recording every request it is sent."""

from __future__ import annotations

import threading
import time
from http.server import ThreadingHTTPServer

# serve_forever notices shutdown() only at its next poll (every 0.5 s by default): a
# fake stopped after each test cost the suite that much per test. 10 ms stops it at once.
POLL_SECONDS = 0.01
# A 400's message when the script ran out or raised (LocalServer.script_next).
NO_REPLY = "The fake server's script has no reply to this request."


def wait_before_answering(reply) -> None:
    """A scripted reply's `delay` (seconds), then its `gate`, called: a threading.Barrier's
    wait holds replies until their requests are all in flight, which proves calls side
    by side without a clock."""
    if getattr(reply, "delay", 0):
        time.sleep(reply.delay)
    if getattr(reply, "gate", None):
        reply.gate()


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
        # What the script raised: a test whose script does not fit the conversation is
        # broken, so stopping the server fails it. A script that ran out (IndexError)
        # ends the run, as many tests mean it to. Either is answered with a 400, which
        # no SDK retries (a 500 cost each such test its retries' back-off, seconds, and
        # a script that raised could pass by accident on the retry).
        self.script_errors: list[str] = []
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

    def __exit__(self, exc_type, *exc):
        self.server.shutdown()
        self.server.server_close()
        if exc_type is None and self.script_errors:
            raise AssertionError(
                f"{type(self).__name__}'s script failed: " + "; ".join(self.script_errors)
            )

    def script_next(self, request):
        """The script's answer to `request` (with the lock held), or None when the script
        ran out or raised (recorded in script_errors)."""
        try:
            if callable(self.script):
                return self.script(request)
            return self.script.pop(0)
        except IndexError:  # the script ran out
            return None
        except Exception as error:
            self.script_errors.append(f"request {len(self.requests)}: {error!r}")
            return None

    def _handler_class(self):  # pragma: no cover - interface
        raise NotImplementedError
