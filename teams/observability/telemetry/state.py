"""The state every part of the traces shares: whether tracing is on (its tracer), the
content switch, the trace context work was started in, the wake-ups' carriers kept for
their turns, the turns' remembered contexts, and the helpers spans share."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
from contextlib import contextmanager

log = logging.getLogger("loom.telemetry")

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
PROTOCOL = "http/protobuf"
# How long a turn's trace context is remembered for its later attempts and links.
REMEMBER_SECONDS = 7 * 24 * 3600
# Content attributes are cut at this many characters (a prompt can be 100k tokens).
CONTENT_LIMIT = 32_000


class _State:
    tracer = None  # None: tracing is off
    provider = None
    capture = False


_state = _State()
# The trace context the current work was started in (an API request's traceparent, a
# turn's parent): what the turns it queues are started in.
_origin: contextvars.ContextVar[dict | None] = contextvars.ContextVar("loom_origin", default=None)
# Wake-ups received by this process's worker, by turn id: their carriers.
_wakes: dict[int, dict] = {}
_wakes_lock = threading.Lock()


def enabled() -> bool:
    return _state.tracer is not None


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


_trace_hint: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "loom_trace_hint", default=None
)


class _Off:
    """The recorder when tracing is off: every method does nothing."""

    span = None

    def __getattr__(self, name):
        return _nothing


def _nothing(*args, **kwargs):
    return args[0] if args else None


OFF = _Off()


@contextmanager
def _off():
    yield OFF


def _content(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text[:CONTENT_LIMIT]


def _error(span, error_type: str, description: str = "") -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description[:500]))


def _span_context(pair):
    from opentelemetry.trace import SpanContext, TraceFlags

    trace_id, span_id = pair
    return SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(1)
    )


def _remembered(turn_id: int) -> dict:
    try:
        from django.core.cache import cache

        return cache.get(f"loom:trace:turn:{turn_id}") or {}
    except Exception:  # the cache is away: no links, the turn goes on
        log.warning("Could not read the trace context of turn %s", turn_id, exc_info=True)
        return {}


def _remember(turn_id: int, value: dict) -> None:
    try:
        from django.core.cache import cache

        cache.set(f"loom:trace:turn:{turn_id}", value, REMEMBER_SECONDS)
    except Exception:
        log.warning("Could not keep the trace context of turn %s", turn_id, exc_info=True)
