"""Trace context across processes (W3C traceparent): an incoming request's, the one a
turn's wake-up carries to the worker, and the one a webhook delivery sends on."""

from __future__ import annotations

from contextlib import contextmanager

from teams.observability.telemetry.state import (
    _origin,
    _remember,
    _remembered,
    _wakes,
    _wakes_lock,
    enabled,
)


def carrier_of(headers) -> dict | None:
    """The W3C trace context of incoming headers (a Django request's META, or a
    plain mapping), or None."""
    traceparent = headers.get("HTTP_TRACEPARENT") or headers.get("traceparent")
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    tracestate = headers.get("HTTP_TRACESTATE") or headers.get("tracestate")
    if tracestate:
        carrier["tracestate"] = tracestate
    return carrier


@contextmanager
def origin(carrier: dict | None):
    """Run work started by a request with this trace context (its traceparent)."""
    if not enabled() or carrier is None:
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    extracted = TraceContextTextMapPropagator().extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        yield  # a malformed traceparent is ignored
        return
    token = _origin.set(dict(carrier))
    attached = otel_context.attach(extracted)  # spans made meanwhile are its children
    try:
        yield
    finally:
        otel_context.detach(attached)
        _origin.reset(token)


def wake_fields(turn_id: int) -> dict:
    """What a turn's wake-up message carries: the trace context it was queued in,
    which the turn also remembers (for a wake-up the sweeper repeats, or a worker
    that got none, as in tests)."""
    carrier = _origin.get() if enabled() else None
    if not carrier:
        return {}
    remembered = _remembered(turn_id)
    if remembered.get("parent") != carrier:
        _remember(turn_id, {**remembered, "parent": carrier})
    return {"trace": carrier}


def wake_received(message: dict) -> None:
    """The worker got a wake-up: keep its trace context for the turn's span."""
    carrier = message.get("trace")
    if enabled() and isinstance(carrier, dict) and message.get("turn_id"):
        with _wakes_lock:
            _wakes[message["turn_id"]] = {k: str(v) for k, v in carrier.items()}


def wake_done(turn_id: int) -> None:
    """The worker is done with a wake-up (its turn ran, or its claim failed: a
    duplicate, a turn run elsewhere): its trace context is not kept any longer."""
    if _wakes:
        with _wakes_lock:
            _wakes.pop(turn_id, None)


def wakes_kept() -> int:
    """How many wake-ups' trace contexts this process keeps for turns not run yet."""
    with _wakes_lock:
        return len(_wakes)


def inject(headers: dict) -> dict:
    """Add the current span's traceparent to outgoing headers (webhooks)."""
    if enabled():
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(headers)
    return headers
