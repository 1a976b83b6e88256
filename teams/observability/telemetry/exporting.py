"""Setting traces up: from the standard OTEL_* variables (configure), into an exporter
(install: the SDK's batch processor, counting what it drops), and down (shutdown).
Tracing on also subscribes to the worker wake-ups the domain sends
(teams.live.events.wake_queued), to carry the trace context a turn was queued in."""

from __future__ import annotations

from teams.live import events
from teams.observability.telemetry.context import wake_fields
from teams.observability.telemetry.state import (
    CAPTURE_CONTENT,
    PROTOCOL,
    SCHEMA_URL,
    _env,
    _state,
    _trace_hint,
    _wakes,
    _wakes_lock,
    enabled,
    log,
)

WAKE_RECEIVER = "loom.telemetry.wake_fields"


def _wake_queued(sender, *, turn_id: int, **kwargs) -> dict:
    return wake_fields(turn_id)


def wanted() -> bool:
    """Do the OTEL_* variables ask for traces (an endpoint, the SDK not disabled)?"""
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return False
    return bool(_env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure() -> bool:
    """Start exporting traces if the environment asks for it; once per process (the
    app's ready()). False, having imported nothing, when it does not."""
    if enabled() or not wanted():
        return enabled()
    protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
    if (protocol or PROTOCOL) != PROTOCOL:
        log.warning(
            "OTEL_EXPORTER_OTLP_PROTOCOL=%s: Loom exports traces over %s only; tracing is off.",
            protocol,
            PROTOCOL,
        )
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    install(OTLPSpanExporter())
    log.info("Exporting traces over OTLP (%s).", PROTOCOL)
    return True


def install(exporter, *, batch: bool = True) -> None:
    """Trace into `exporter` (tests pass the SDK's InMemorySpanExporter, unbatched)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from teams.observability import metrics

    resource = Resource.create({"service.name": _env("OTEL_SERVICE_NAME") or "loom"})
    provider = TracerProvider(resource=resource, id_generator=_ids())
    exporter = _counting(exporter)
    if batch:
        provider.add_span_processor(_batching(exporter, metrics))
    else:
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _state.provider = provider
    _state.tracer = provider.get_tracer("loom", schema_url=SCHEMA_URL)
    _state.capture = _env(CAPTURE_CONTENT).lower() == "true"
    # The domain says when a wake-up is queued; the trace context rides along.
    events.wake_queued.connect(_wake_queued, dispatch_uid=WAKE_RECEIVER)


def shutdown() -> None:
    """Flush and stop (tests; the SDK flushes at exit by itself)."""
    events.wake_queued.disconnect(dispatch_uid=WAKE_RECEIVER)
    provider, _state.provider, _state.tracer = _state.provider, None, None
    if provider is not None:
        provider.shutdown()
    with _wakes_lock:
        _wakes.clear()


def _ids():
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class Ids(RandomIdGenerator):
        """Random ids, except a turn's later attempt keeps its first one's trace."""

        def generate_trace_id(self) -> int:
            return _trace_hint.get() or super().generate_trace_id()

    return Ids()


def _counting(exporter):
    """The exporter, counting the spans of batches it failed to send."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from teams.observability import metrics

    class Counting(SpanExporter):
        def export(self, spans):
            try:
                result = exporter.export(spans)
            except Exception:
                log.warning("Exporting %s spans failed", len(spans), exc_info=True)
                result = SpanExportResult.FAILURE
            if result != SpanExportResult.SUCCESS:
                metrics.SPANS_DROPPED.labels(reason="export_failed").inc(len(spans))
            return result

        def shutdown(self):
            return exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return Counting()


def _batching(exporter, metrics):
    """The SDK's batch processor (bounded queue, OTEL_BSP_*), counting what a full
    queue drops."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    class Batching(BatchSpanProcessor):
        def on_end(self, span) -> None:
            queue = getattr(self._batch_processor, "_queue", None)
            if queue is not None and len(queue) >= (queue.maxlen or 0) > 0:
                metrics.SPANS_DROPPED.labels(reason="queue_full").inc()
            super().on_end(span)

    return Batching(exporter)
