"""The spans of what a turn calls: a model (`chat <model>`, with its HTTP attempts), a
tool (`execute_tool <tool>`), an MCP server (`tools/call <tool>`), and a webhook
delivery's POST."""

from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from typing import Any

from teams.observability.telemetry.state import OFF, _content, _error, _off, _state, enabled

# The GenAI provider names of the endpoints the conventions know (others: their API).
PROVIDER_NAMES = {"gemini": "gcp.gemini", "openrouter": "openrouter", "ollama": "ollama"}


def provider_name(model: str) -> str:
    """The GenAI provider name (gen_ai.provider.name) of a model id: its endpoint's
    when the conventions know it, else the API the endpoint speaks."""
    from teams.lib import endpoints

    route = endpoints.route(model)
    if route.endpoint is None:
        return "loom.offline" if not route.problem else "unknown"
    return PROVIDER_NAMES.get(route.endpoint.name, route.endpoint.api)


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

    attributes = _chat_attributes(model, max_tokens, provider, system, messages, purpose, extra)
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


def _chat_attributes(model, max_tokens, provider, system, messages, purpose, extra) -> dict:
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
    return attributes


def _error_type(exc: BaseException) -> str:
    """error.type of a failed model call: the HTTP status, or the exception's class."""
    cause = exc.__cause__ or exc
    status = getattr(cause, "status_code", None)
    if isinstance(status, int):
        return str(status)
    return type(cause).__name__


def http_client(factory, verify=True):
    """An httpx client for a model SDK whose every attempt (retries included) is a
    `POST` span under the model call's; None when tracing is off (the SDK's default).
    `factory(transport=...)` makes the client (anthropic.DefaultHttpxClient); `verify`
    is its transport's TLS verification (an ssl.SSLContext to share one)."""
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

    return factory(transport=Traced(verify=verify))


class ToolRecorder:
    def __init__(self, span):
        self.span = span

    def done(self, result):
        """Record a ToolResult (an "Error: ..." marks the span failed); returns it."""
        if self.span is not None:
            if result.is_error:  # the result's text only when content is captured
                _error(self.span, "tool_error", result.text[:200] if _state.capture else "")
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
