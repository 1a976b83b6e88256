"""The model boundary: a provider per endpoint API, chosen by the model id.

`loom-offline` is always the offline model; any other id routes to its endpoint
(teams.lib.endpoints: `ENDPOINT/MODEL`, a bare `claude-…` id the `anthropic` one):
an Anthropic-style endpoint is called through the anthropic SDK (AnthropicProvider),
an OpenAI-style one through the openai SDK's Chat Completions
(teams.engine.openai_chat). A missing key is a ModelError that says so, never a
silent fallback. Every provider speaks one protocol, respond(...) -> ModelReply,
with streamed text, usage and failures as ModelError, so the loop does not know
which it has.

A model without a price (teams.lib.catalog.price_problem) is never called: a paid
provider's respond() refuses it with a ModelError naming the model and how to add
its price, so a turn on such a model fails saying so instead of costing $0."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING

from django.conf import settings

from teams.engine.offline import OfflineProvider
from teams.engine.reply import DEFAULT_MAX_TOKENS, ModelReply, Provider
from teams.errors import ModelError
from teams.lib import endpoints, outbound
from teams.lib.catalog import OFFLINE_MODEL, Usage, price_problem
from teams.lib.endpoints import API_ANTHROPIC, API_OPENAI, Endpoint
from teams.observability import telemetry
from teams.services import without_nul

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger("loom.model")


class AnthropicProvider:
    def __init__(self, client: anthropic.Anthropic):
        self.client = client

    def respond(
        self,
        *,
        model: str,
        system: list[dict],
        messages: list[dict],
        tools: list[dict],
        max_tokens: int = DEFAULT_MAX_TOKENS,
        on_text=None,
    ) -> ModelReply:
        import anthropic  # see _anthropic

        unpriced = price_problem(model)
        if unpriced:
            raise ModelError(unpriced)
        api_model = endpoints.route(model).model  # `ollama/qwen3:8b` asks for qwen3:8b
        kwargs = {
            "model": api_model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": messages,
        }
        if tools:
            kwargs["tools"] = tools
        try:
            with self.client.messages.stream(**kwargs) as stream:
                if on_text is not None:
                    for text in stream.text_stream:
                        on_text(text)
                final = stream.get_final_message()
        except anthropic.APIStatusError as exc:
            raise ModelError(describe_status_error(exc)) from exc
        except anthropic.APIConnectionError as exc:
            refused = outbound.refusal_in(exc)
            if refused:
                raise ModelError(f"The endpoint's address is refused: {refused}") from exc
            raise ModelError(f"Could not reach the Messages API: {exc}") from exc
        except anthropic.APIError as exc:  # an error event in the middle of a stream
            raise ModelError(f"The Messages API failed: {exc}") from exc
        usage = final.usage
        return ModelReply(
            content=[_block_dict(block) for block in final.content],
            stop_reason=final.stop_reason or "end_turn",
            # Priced by Loom's id: the endpoint's model names are its own.
            model=(final.model or model) if api_model == model else model,
            usage=Usage(
                input_tokens=usage.input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
                cache_creation_tokens=getattr(usage, "cache_creation_input_tokens", 0) or 0,
                cache_read_tokens=getattr(usage, "cache_read_input_tokens", 0) or 0,
            ),
        )


def describe_status_error(exc: anthropic.APIStatusError) -> str:
    detail = ""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error") if isinstance(body.get("error"), dict) else body
        detail = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
    return f"Messages API returned HTTP {exc.status_code}" + (f" ({detail})" if detail else "")


def _block_dict(block) -> dict:
    if block.type == "text":
        data = {"type": "text", "text": block.text}
    elif block.type == "tool_use":
        data = {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    else:
        data = block.model_dump(mode="json", exclude_none=True)
    return without_nul(data)


_client_lock = threading.Lock()
_clients: dict[tuple, object] = {}


def _client(kind: str, endpoint: Endpoint, make):
    """One SDK client per endpoint's settings (key, URL, headers), shared by threads
    (both SDKs are thread-safe); made again when a setting changes."""
    key = (
        kind,
        endpoint,
        endpoint.key(),
        endpoint.url(),
        tuple(sorted(endpoint.headers().items())),
        getattr(settings, "LOOM_MODEL_MAX_RETRIES", 4),
        settings.LOOM_MODEL_TIMEOUT,
        telemetry.enabled(),
    )
    with _client_lock:
        if key not in _clients:
            _clients[key] = make()
        return _clients[key]


def guarded(endpoint: Endpoint) -> bool:
    """Does this endpoint's traffic go through the outbound guard? Every address a
    person gave does, unless the endpoint is `local` (loopback and private addresses
    allowed); the built-ins as shipped lead to their vendors."""
    return not endpoint.builtin and not endpoint.local and bool(endpoint.base_url)


def http_client(endpoint: Endpoint, default_class):
    """The HTTP client an endpoint's SDK client sends with: the outbound guard's for a
    guarded endpoint (checked first, so a refused URL says why before any request),
    else the SDK's own kind, traced when tracing is on (each HTTP attempt, the SDK's
    retries, is a span of the call's); all with the process's one TLS context."""
    if not guarded(endpoint):
        shared_tls = outbound.tls_context(trust_env=True)  # as the SDK's own client's
        return telemetry.http_client(default_class, verify=shared_tls) or default_class(
            verify=shared_tls
        )
    try:
        outbound.check_url(endpoint.base_url)
    except outbound.Refused as exc:
        raise ModelError(
            f"The endpoint {endpoint.name!r} is not called: its base URL is refused: "
            f"{exc.reason}. A superuser marks it local if it is a server of this network."
        ) from None
    timeout = settings.LOOM_MODEL_TIMEOUT
    return outbound.client(timeout=timeout, total_timeout=timeout * 5)


def _anthropic(endpoint: Endpoint) -> Provider:
    if not endpoint.key() and endpoint.key_env == "ANTHROPIC_API_KEY":
        raise ModelError(
            "ANTHROPIC_API_KEY is not set, and Claude models need it: set it, or give the "
            f"agent the model {OFFLINE_MODEL!r} to run offline"
        )
    if endpoint.problem():
        raise ModelError(f"No call is made: {endpoint.problem()}")
    # Imported for the first client, not with this module nor to say a model cannot
    # run (serve's check at start): a process that never calls Claude (the offline
    # model, a management command) is spared over a second of CPU.
    import anthropic

    client = _client(
        "anthropic",
        endpoint,
        lambda: anthropic.Anthropic(
            api_key=endpoint.key() or "none",  # a keyless local server ignores it
            base_url=endpoint.url() or None,
            default_headers=endpoint.headers() or None,
            max_retries=getattr(settings, "LOOM_MODEL_MAX_RETRIES", 4),
            timeout=settings.LOOM_MODEL_TIMEOUT,
            http_client=http_client(endpoint, anthropic.DefaultHttpxClient),
        ),
    )
    return AnthropicProvider(client)


def _openai(endpoint: Endpoint) -> Provider:
    if endpoint.problem():
        raise ModelError(f"No call is made: {endpoint.problem()}")
    import openai  # for the first client, as anthropic is (see _anthropic)

    from teams.engine.openai_chat import OpenAIChatProvider

    client = _client(
        "openai",
        endpoint,
        lambda: openai.OpenAI(
            api_key=endpoint.key() or "none",  # a keyless local server ignores it
            base_url=endpoint.url() or None,
            default_headers=endpoint.headers() or None,
            max_retries=getattr(settings, "LOOM_MODEL_MAX_RETRIES", 4),
            timeout=settings.LOOM_MODEL_TIMEOUT,
            http_client=http_client(endpoint, openai.DefaultHttpxClient),
        ),
    )
    return OpenAIChatProvider(client, endpoint)


# The offline model's provider, and each endpoint API's (made for an endpoint).
PROVIDERS: dict[str, Callable[..., Provider]] = {
    OFFLINE_MODEL: OfflineProvider,
    API_ANTHROPIC: _anthropic,
    API_OPENAI: _openai,
}


# The APIs whose provider reads cache_control breakpoints in message blocks (an
# OpenAI-style server caches prompts by itself, and reports the cached tokens).
PROMPT_CACHES = {API_ANTHROPIC}


def caches_prompts(model: str) -> bool:
    """Does this model id's provider have a prompt cache (so the history goes to it
    as content blocks with cache breakpoints)?"""
    endpoint = endpoints.route(model).endpoint
    return endpoint is not None and endpoint.api in PROMPT_CACHES


# Set while a replay runs (teams.engine.replay): every model call of this thread is
# answered by it, from the recorded run, whatever the model id.
replaying: ContextVar = ContextVar("loom_replaying", default=None)


def provider_for(model: str, purpose: str = "turn") -> Provider:
    """The provider serving this model id; ModelError when none can (the id names no
    endpoint, the endpoint's key is unset). `purpose` says which call it is for a
    replay: a turn's step, or a tool's own question."""
    replay = replaying.get()
    if replay is not None:
        return replay.provider(purpose)
    route = endpoints.route(model)
    if route.problem:
        raise ModelError(route.problem)
    if route.endpoint is None:
        return PROVIDERS[OFFLINE_MODEL]()
    return PROVIDERS[route.endpoint.api](route.endpoint)


def model_problem(model: str) -> str:
    """Why calls to this model id would fail now, or "" when they can be made (an
    endpoint serves it, its key is set, it has a price)."""
    try:
        provider_for(model)
    except ModelError as exc:
        return exc.message
    return price_problem(model)
