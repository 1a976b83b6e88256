"""The model boundary: a provider per family of model ids, chosen by the id.

`loom-offline` is always the offline model; a `claude-…` id is Claude through the
anthropic SDK and needs ANTHROPIC_API_KEY (a missing key is a ModelError that says
so, never a silent fallback). Every provider speaks one protocol, respond(...) ->
ModelReply, with streamed text, usage and failures as ModelError, so the loop does
not know which it has. Providers for other vendors plug in to PROVIDERS.

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
from teams.lib.catalog import CLAUDE_PREFIX, OFFLINE_MODEL, Usage, family_of, price_problem
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
        kwargs = {"model": model, "max_tokens": max_tokens, "system": system, "messages": messages}
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
            raise ModelError(f"Could not reach the Messages API: {exc}") from exc
        except anthropic.APIError as exc:  # an error event in the middle of a stream
            raise ModelError(f"The Messages API failed: {exc}") from exc
        usage = final.usage
        return ModelReply(
            content=[_block_dict(block) for block in final.content],
            stop_reason=final.stop_reason or "end_turn",
            model=final.model or model,
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
_clients: dict[tuple, anthropic.Anthropic] = {}


def _anthropic() -> Provider:
    # Imported on the first call, not with this module: a process that never calls
    # Claude (the offline model, a management command) is spared a second of CPU.
    import anthropic

    if not settings.ANTHROPIC_API_KEY:
        raise ModelError(
            "ANTHROPIC_API_KEY is not set, and Claude models need it: set it, or give the "
            f"agent the model {OFFLINE_MODEL!r} to run offline"
        )
    key = (
        settings.ANTHROPIC_API_KEY,
        settings.ANTHROPIC_BASE_URL,
        getattr(settings, "LOOM_MODEL_MAX_RETRIES", 4),
        settings.LOOM_MODEL_TIMEOUT,
        telemetry.enabled(),
    )
    with _client_lock:
        if key not in _clients:
            api_key, base_url, retries, timeout, _ = key
            _clients[key] = anthropic.Anthropic(
                api_key=api_key,
                base_url=base_url,
                max_retries=retries,
                timeout=timeout,
                # Traced: each HTTP attempt (the SDK's retries) is a span of the call's.
                http_client=telemetry.http_client(anthropic.DefaultHttpxClient),
            )
        return AnthropicProvider(_clients[key])


# Each family of teams.lib.catalog.MODEL_FAMILIES -> the factory of its provider.
PROVIDERS: dict[str, Callable[[], Provider]] = {
    OFFLINE_MODEL: OfflineProvider,
    CLAUDE_PREFIX: _anthropic,
}


# The families whose provider reads cache_control breakpoints in message blocks.
PROMPT_CACHES = {CLAUDE_PREFIX}


def caches_prompts(model: str) -> bool:
    """Does this model id's provider have a prompt cache (so the history goes to it
    as content blocks with cache breakpoints)?"""
    return family_of(model) in PROMPT_CACHES


# Set while a replay runs (teams.engine.replay): every model call of this thread is
# answered by it, from the recorded run, whatever the model id.
replaying: ContextVar = ContextVar("loom_replaying", default=None)


def provider_for(model: str, purpose: str = "turn") -> Provider:
    """The provider serving this model id; ModelError when none can. `purpose` says
    which call it is for a replay: a turn's step, or a tool's own question."""
    replay = replaying.get()
    if replay is not None:
        return replay.provider(purpose)
    family = family_of(model)
    if family is None:
        raise ModelError(
            f"No provider serves the model {model!r}: use a {CLAUDE_PREFIX}… id or "
            f"{OFFLINE_MODEL!r}"
        )
    return PROVIDERS[family]()


def model_problem(model: str) -> str:
    """Why calls to this model id would fail now, or "" when they can be made (a
    provider serves it, its key is set, it has a price)."""
    try:
        provider_for(model)
    except ModelError as exc:
        return exc.message
    return price_problem(model)
