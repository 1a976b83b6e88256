"""OpenTelemetry traces of what the agents do, in the GenAI semantic conventions
(v1.41.0, https://opentelemetry.io/docs/specs/semconv/gen-ai/): the operator's view
of a run, readable by Jaeger, Tempo, Honeycomb, Langfuse, Phoenix, Datadog...

Configured by the standard variables only (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf, the
only one Loom ships, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, default `loom`,
OTEL_TRACES_SAMPLER, OTEL_SDK_DISABLED, OTEL_BSP_*). Without an endpoint tracing is
off: configure() returns before importing the SDK, no thread starts, and every helper
here is a no-op (importing this module has no side effect at all). Spans are
exported in batches from a bounded queue by the SDK's own thread; a collector that is
down costs a turn nothing, and the spans lost are counted
(loom_trace_spans_dropped_total on /metrics).

The spans (docs/observability.md shows a tree):
  invoke_agent <agent>      one per attempt of a turn (turn_span)
    chat <model>            each model call (chat): the turn's, smart retrieval's
      POST                  each HTTP attempt of the SDK: its retries show
    execute_tool <tool>     each tool call (tool_call)
      chat <model>          what the tool costs: a consultation, a smart retrieval
      tools/call <tool>     an MCP call (mcp_call, wrapped around the MCP client)

A turn that resumes after the PM answered (a question, a budget, an approval) links
to the attempt that asked, with loom.pm_request.id and loom.pm_request.wait_seconds;
a turn attempted again after its worker died is a new span in the same trace.

Context crosses processes with W3C traceparent: an API request's header becomes the
parent of the turns it queues (events.wake_worker carries wake_fields()), and each
turn remembers its parent and its attempts' span contexts in the cache (shared
through Redis when the processes are several) for its later attempts and links.

Message content (prompts, replies, tool arguments and results) is recorded only with
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true; attributes never hold keys,
webhook secrets or MCP environment values."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any

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


# --- set-up ------------------------------------------------------------------------


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


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


def shutdown() -> None:
    """Flush and stop (tests; the SDK flushes at exit by itself)."""
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


_trace_hint: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "loom_trace_hint", default=None
)


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


# --- propagation -------------------------------------------------------------------


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


# --- spans -------------------------------------------------------------------------


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


def _pm_request_resumed(turn, remembered: dict):
    """The answered PM request this attempt resumes after, and the span context of
    the attempt that asked; (None, None) when it resumes after none."""
    from teams.models import PMRequest, Turn

    answered = PMRequest.objects.filter(status=PMRequest.Status.ANSWERED, turn__isnull=False)
    if turn.attempts > 1:  # an approval: this turn's previous attempt asked
        request = (
            answered.filter(turn=turn, kind=PMRequest.Kind.APPROVAL)
            .order_by("-answered_at")
            .first()
        )
        if request is None or request.pk in remembered.get("pm_requests", []):
            return None, None
        return request, remembered.get("attempts", {}).get(str(turn.attempts - 1))
    request = (
        answered.filter(team_id=turn.team_id, answered_at__lte=turn.queued_at)
        .exclude(kind=PMRequest.Kind.APPROVAL)
        .order_by("-answered_at")
        .first()
    )
    if request is None:
        return None, None
    first_after = (
        Turn.objects.filter(team_id=turn.team_id, pk__gt=request.turn_id)
        .filter(queued_at__gte=request.answered_at)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if first_after != turn.pk:
        return None, None
    asking = _remembered(request.turn_id).get("attempts", {})
    attempts = Turn.objects.filter(pk=request.turn_id).values_list("attempts", flat=True).first()
    return request, asking.get(str(attempts))


class TurnRecorder:
    def __init__(self, span):
        self.span = span

    def finish(self, turn) -> None:
        """The turn's end as the database has it."""
        outcome = turn.outcome or turn.status
        self.span.set_attribute("loom.turn.outcome", outcome)
        self.span.set_attribute("loom.turn.status", turn.status)
        if turn.status == "failed":
            _error(self.span, "turn_failed", turn.error)

    def crashed(self, exc: BaseException) -> None:
        _error(self.span, type(exc).__name__, str(exc))


def turn_span(turn):
    """The span of one attempt of a turn, `invoke_agent <agent>`; the turns queued
    while it runs start in the same trace context as this one."""
    if not enabled():
        return _off()
    return _turn_span(turn)


@contextmanager
def _turn_span(turn):
    from opentelemetry import context as otel_context
    from opentelemetry.trace import Link, SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    with _wakes_lock:
        woken = _wakes.pop(turn.id, None)
    remembered = _remembered(turn.id)
    parent = woken or remembered.get("parent")
    agent, team = turn.agent, turn.team
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent.name,
        "gen_ai.agent.id": str(agent.id),
        "gen_ai.request.model": turn.model or agent.effective_model,
        "loom.team": team.slug,
        "loom.team.id": team.id,
        "loom.turn.id": turn.id,
        "loom.turn.number": turn.number,
        "loom.turn.purpose": turn.purpose,
        "loom.phase": turn.phase,
        "loom.turn.attempt": turn.attempts,
    }
    links = []
    previous = remembered.get("attempts", {}).get(str(turn.attempts - 1))
    try:
        request, asked = _pm_request_resumed(turn, remembered)
    except Exception:  # never fail a turn over its trace
        log.warning("Could not find what turn %s resumes after", turn.id, exc_info=True)
        request, asked = None, None
    if request is not None:
        waited = (request.answered_at - request.created_at).total_seconds()
        about = {
            "loom.pm_request.id": request.pk,
            "loom.pm_request.kind": request.kind,
            "loom.pm_request.wait_seconds": round(waited, 3),
        }
        attributes.update(about)
        if asked:
            links.append(Link(_span_context(asked), about))
            if asked == previous:
                previous = None
        remembered.setdefault("pm_requests", []).append(request.pk)
    if previous:
        links.append(Link(_span_context(previous), {"loom.link": "previous_attempt"}))
    if parent:
        context = TraceContextTextMapPropagator().extract(parent)
        hint = None
    else:  # a root: a later attempt stays in the first one's trace
        context = otel_context.Context()
        first = remembered.get("attempts", {}).get("1")
        hint = int(first[0], 16) if first and turn.attempts > 1 else None
    hinted = _trace_hint.set(hint)
    try:
        span = _state.tracer.start_span(
            f"invoke_agent {agent.name}",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
    finally:
        _trace_hint.reset(hinted)
    own = span.get_span_context()
    remembered["parent"] = parent
    remembered.setdefault("attempts", {})[str(turn.attempts)] = [
        format(own.trace_id, "032x"),
        format(own.span_id, "016x"),
    ]
    _remember(turn.id, remembered)
    from opentelemetry import trace

    origin_token = _origin.set(parent)
    try:
        with trace.use_span(span, end_on_exit=True, record_exception=False):
            yield TurnRecorder(span)
    finally:
        _origin.reset(origin_token)


# The GenAI provider names of Loom's model families and consultant providers.
PROVIDER_NAMES = {"claude-": "anthropic", "loom-offline": "loom.offline"}


def provider_name(model: str) -> str:
    from teams.lib.catalog import family_of

    return PROVIDER_NAMES.get(family_of(model) or "", "unknown")


def _parts(blocks) -> list[dict]:
    """Anthropic content blocks as the convention's message parts."""
    if isinstance(blocks, str):
        return [{"type": "text", "content": blocks}]
    parts = []
    for block in blocks or []:
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif kind == "tool_use":
            parts.append(
                {
                    "type": "tool_call",
                    "id": block.get("id"),
                    "name": block.get("name"),
                    "arguments": block.get("input"),
                }
            )
        elif kind == "tool_result":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": block.get("tool_use_id"),
                    "response": block.get("content"),
                }
            )
    return parts


class ChatRecorder:
    def __init__(self, span, model: str):
        self.span, self.model, self.attempts = span, model, 0

    def reply(self, reply) -> Any:
        """Record a ModelReply (its model, usage, stop reason, content); returns it."""
        self.usage(reply.model, reply.usage)
        if self.span is not None:
            self.span.set_attribute("gen_ai.response.finish_reasons", [reply.stop_reason])
            if _state.capture:
                output = [
                    {
                        "role": "assistant",
                        "parts": _parts(reply.content),
                        "finish_reason": reply.stop_reason,
                    }
                ]
                self.span.set_attribute("gen_ai.output.messages", _content(output))
        return reply

    def usage(self, model: str, usage) -> None:
        from teams.lib.catalog import cost_of

        self.model = model or self.model
        span = self.span
        if span is None:
            return
        span.set_attribute("gen_ai.response.model", self.model)
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_tokens)
        try:
            span.set_attribute("loom.cost_usd", float(cost_of(self.model, usage)))
        except Exception:  # an unpriced model: no cost to say
            pass

    def output(self, data) -> None:
        """A structured reply (a consultant's PeerOutput), recorded as content."""
        if self.span is not None and _state.capture and data is not None:
            message = [
                {"role": "assistant", "parts": [{"type": "text", "content": _content(data)}]}
            ]
            self.span.set_attribute("gen_ai.output.messages", _content(message))


_chat: contextvars.ContextVar[ChatRecorder | None] = contextvars.ContextVar(
    "loom_chat", default=None
)


@contextmanager
def chat(
    *,
    model: str,
    max_tokens: int,
    provider: str | None = None,
    system=None,
    messages=None,
    purpose: str = "turn",
    **extra,
):
    """A model call, `chat <model>`; its latency goes to loom_model_call_seconds
    whether tracing is on or not. A ModelError (or any exception) raised inside marks
    it failed and goes on up."""
    from teams.observability import metrics

    started = time.monotonic()
    result = "ok"
    if not enabled():
        try:
            yield ChatRecorder(None, model)
        except BaseException:
            result = "error"
            raise
        finally:
            metrics.observe_model_call(model, result, time.monotonic() - started)
        return
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider or provider_name(model),
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens,
        "loom.model_call.purpose": purpose,
        **{f"loom.{k}": v for k, v in extra.items() if v is not None},
    }
    if _state.capture:
        if system:
            attributes["gen_ai.system_instructions"] = _content(_parts(system))
        if messages:
            attributes["gen_ai.input.messages"] = _content(
                [{"role": m["role"], "parts": _parts(m["content"])} for m in messages]
            )
    recorder = None
    with _state.tracer.start_as_current_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        recorder = ChatRecorder(span, model)
        token = _chat.set(recorder)
        try:
            yield recorder
        except BaseException as exc:
            result = "error"
            _error(span, _error_type(exc), str(exc))
            raise
        finally:
            _chat.reset(token)
            if recorder.attempts > 1:
                span.set_attribute("loom.retries", recorder.attempts - 1)
            trace.get_current_span()  # (the span ends as the with closes)
            metrics.observe_model_call(recorder.model, result, time.monotonic() - started)


def _error_type(exc: BaseException) -> str:
    """error.type of a failed model call: the HTTP status, or the exception's class."""
    cause = exc.__cause__ or exc
    status = getattr(cause, "status_code", None)
    if isinstance(status, int):
        return str(status)
    return type(cause).__name__


def http_client(factory):
    """An httpx client for a model SDK whose every attempt (retries included) is a
    `POST` span under the model call's; None when tracing is off (the SDK's default).
    `factory(transport=...)` makes the client (anthropic.DefaultHttpxClient)."""
    if not enabled():
        return None
    import httpx2 as httpx

    class Traced(httpx.HTTPTransport):
        def handle_request(self, request):
            recorder = _chat.get()
            if not enabled() or recorder is None:
                return super().handle_request(request)
            from opentelemetry.trace import SpanKind

            recorder.attempts += 1
            attributes = {
                "http.request.method": request.method,
                "server.address": request.url.host,
                "server.port": request.url.port or (443 if request.url.scheme == "https" else 80),
                "url.path": request.url.path,
            }
            if recorder.attempts > 1:
                attributes["http.request.resend_count"] = recorder.attempts - 1
            with _state.tracer.start_as_current_span(
                request.method, kind=SpanKind.CLIENT, attributes=attributes, record_exception=False
            ) as span:
                try:
                    response = super().handle_request(request)
                except Exception as exc:
                    _error(span, type(exc).__name__, str(exc))
                    raise
                span.set_attribute("http.response.status_code", response.status_code)
                if response.status_code >= 400:
                    _error(span, str(response.status_code))
                return response

    return factory(transport=Traced())


class ToolRecorder:
    def __init__(self, span):
        self.span = span

    def done(self, result):
        """Record a ToolResult (an "Error: ..." marks the span failed); returns it."""
        if self.span is not None:
            if result.is_error:
                _error(self.span, "tool_error", result.text[:200])
            if result.ends_turn is not None:
                self.span.set_attribute("loom.tool.ends_turn", str(result.ends_turn.outcome))
            if _state.capture:
                self.span.set_attribute("gen_ai.tool.call.result", _content(result.text))
        return result


def tool_call(use: dict, tool=None):
    """A tool call of the model, `execute_tool <tool>`."""
    if not enabled():
        return _off()
    return _tool_call(use, tool)


@contextmanager
def _tool_call(use: dict, tool):
    from opentelemetry.trace import SpanKind

    name = use.get("name", "")
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": use.get("id", ""),
        # Loom's own tools run in the process (functions); an MCP server's are extensions.
        "gen_ai.tool.type": "extension" if getattr(tool, "server_id", None) else "function",
    }
    description = getattr(tool, "description", "")
    if isinstance(description, str) and description:
        attributes["gen_ai.tool.description"] = description[:500]
    if _state.capture:
        attributes["gen_ai.tool.call.arguments"] = _content(use.get("input") or {})
    with _state.tracer.start_as_current_span(
        f"execute_tool {name}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield ToolRecorder(span)
        except BaseException as exc:
            _error(span, type(exc).__name__, str(exc))
            raise


def mcp_call(server, tool: str):
    """The hook for the MCP client: wrap `mcp_client.call_tool(server, tool, ...)` in
    `with telemetry.mcp_call(server, tool):` and the call is a `tools/call <tool>`
    client span (MCP conventions) under its execute_tool span, named by the server's
    name only (never its command, URL headers or environment values)."""
    if not enabled():
        return _off()
    return _mcp_call(server, tool)


@contextmanager
def _mcp_call(server, tool: str):
    from opentelemetry.trace import SpanKind

    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "loom.mcp.server": getattr(server, "name", str(server)),
        "loom.mcp.transport": getattr(server, "transport", ""),
    }
    with _state.tracer.start_as_current_span(
        f"tools/call {tool}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            _error(span, type(exc).__name__, str(exc))
            raise


def webhook_span(delivery):
    """A webhook delivery's POST (a client span); inject() then puts its traceparent
    in the request's headers."""
    if not enabled():
        return _off()
    return _webhook_span(delivery)


@contextmanager
def _webhook_span(delivery):
    from opentelemetry import context as otel_context
    from opentelemetry.trace import SpanKind

    attributes = {
        "http.request.method": "POST",
        "loom.webhook.id": delivery.webhook_id,
        "loom.webhook.event": delivery.event,
        "loom.webhook.delivery.id": delivery.pk,
        "loom.webhook.attempt": delivery.attempts,
    }
    with _state.tracer.start_as_current_span(
        "POST",
        context=otel_context.Context(),
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
    ) as span:
        yield span


def webhook_result(span, outcome: str, status_code=None) -> None:
    if span is None or span is OFF:
        return
    if status_code is not None:
        span.set_attribute("http.response.status_code", status_code)
    span.set_attribute("loom.webhook.outcome", outcome or "lost")
    if outcome != "delivered":
        _error(span, str(status_code) if status_code else "delivery_failed")
