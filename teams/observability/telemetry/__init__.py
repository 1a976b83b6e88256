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
webhook secrets or MCP environment values.

The package: `state` (what the parts share), `exporting` (set-up), `context`
(propagation), `turn_spans` and `call_spans`; its names are re-exported here."""

from teams.observability.telemetry.call_spans import (
    PROVIDER_NAMES,
    ChatRecorder,
    ToolRecorder,
    chat,
    http_client,
    mcp_call,
    provider_name,
    tool_call,
    webhook_result,
    webhook_span,
)
from teams.observability.telemetry.context import (
    carrier_of,
    inject,
    origin,
    wake_done,
    wake_fields,
    wake_received,
    wakes_kept,
)
from teams.observability.telemetry.exporting import configure, install, shutdown, wanted
from teams.observability.telemetry.state import (
    CAPTURE_CONTENT,
    CONTENT_LIMIT,
    OFF,
    PROTOCOL,
    REMEMBER_SECONDS,
    SCHEMA_URL,
    SEMCONV_VERSION,
    enabled,
)
from teams.observability.telemetry.turn_spans import TurnRecorder, turn_span

__all__ = [
    "CAPTURE_CONTENT",
    "CONTENT_LIMIT",
    "OFF",
    "PROTOCOL",
    "PROVIDER_NAMES",
    "REMEMBER_SECONDS",
    "SCHEMA_URL",
    "SEMCONV_VERSION",
    "ChatRecorder",
    "ToolRecorder",
    "TurnRecorder",
    "carrier_of",
    "chat",
    "configure",
    "enabled",
    "http_client",
    "inject",
    "install",
    "mcp_call",
    "origin",
    "provider_name",
    "shutdown",
    "tool_call",
    "turn_span",
    "wake_done",
    "wake_fields",
    "wake_received",
    "wakes_kept",
    "wanted",
    "webhook_result",
    "webhook_span",
]
