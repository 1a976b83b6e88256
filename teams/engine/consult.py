"""Calling a consultant: one structured request to the profile's provider, forced
into the PeerOutput schema (less the responder and timestamp, which Loom sets): a
forced tool call on Anthropic, a strict JSON schema on OpenAI-compatible servers, a
canned answer offline; an A2A agent is sent the request as a message
(teams.engine.a2a_consult).

Only the network happens here, so ask_multi can run several at once in threads; the
caller checks each call against the budgets first (teams.run.budgets.call_refusal) and
validates and records the reply. A profile whose key is missing fails with a
ModelError before any request is made."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from teams.engine.providers import describe_status_error, replaying
from teams.errors import ModelError
from teams.integrations.consultations import (
    OUTPUT_TOKENS,
    PeerFrame,
    endpoint_of,
    key_problem,
    peer_output_schema,
    profile_key,
    strict_schema,
)
from teams.lib import endpoints, outbound
from teams.lib.catalog import Usage
from teams.models import ConsultantProfile
from teams.observability import telemetry

TIMEOUT_SECONDS = 120
A2A_TIMEOUT_SECONDS = TIMEOUT_SECONDS  # an A2A agent's whole exchange, polls included
MAX_ANSWER_BYTES = 2 * 1024 * 1024  # a consultant's answer read at most (a reply is far less)
TOOL_NAME = "peer_output"


@dataclass
class StructuredReply:
    data: dict | None  # the parsed JSON object, before validation
    model: str
    usage: Usage
    seconds: float
    problem: str = ""  # truncated, not JSON: said plainly


def consult(profile: ConsultantProfile, frame: PeerFrame) -> StructuredReply:
    """Ask one consultant; ModelError when it cannot be asked or the call fails."""
    replay = replaying.get()
    if replay is not None:  # a replay answers from the recorded consultation
        return replay.consult(profile, frame)
    problem = key_problem(profile)
    if problem:
        raise ModelError(f"Consultant {profile.name} cannot be asked: {problem}")
    if profile.provider == ConsultantProfile.Provider.A2A:
        return _a2a(profile, frame)
    asked = _through_endpoint(profile)  # an ENDPOINT/MODEL id: that endpoint's settings
    guarded = _guards(asked)
    if guarded:
        try:  # checked again when connecting: the name may change its answer meanwhile
            outbound.check_url(asked.base_url)
        except outbound.Refused as exc:
            raise ModelError(
                f"Consultant {profile.name} is not asked: its base URL is refused: {exc.reason}."
            ) from None
    started = time.monotonic()
    call = CALLS[asked.provider]
    with telemetry.chat(  # chat <model>, under the ask_peer/ask_multi tool's span
        model=profile.model,
        max_tokens=OUTPUT_TOKENS,
        provider=asked.provider,
        system=frame.system,
        messages=[{"role": "user", "content": frame.prompt}],
        purpose="consultation",
        consultant=profile.name,
    ) as recorder:
        reply = call(asked, frame)
        if asked is not profile:
            reply.model = profile.model  # priced by Loom's id, not the endpoint's name
        recorder.usage(reply.model, reply.usage)
        recorder.output(reply.data)
    reply.seconds = time.monotonic() - started
    return reply


def _a2a(profile: ConsultantProfile, frame: PeerFrame) -> StructuredReply:
    """Ask an A2A agent (teams.engine.a2a_consult): its answer as a PeerOutput with
    no confidence of its own and no token usage (an A2A call has no token price: the
    consultation costs $0)."""
    try:  # checked again when connecting: the name may change its answer meanwhile
        outbound.check_url(profile.a2a_url)
    except outbound.Refused as exc:
        raise ModelError(
            f"Consultant {profile.name} is not asked: its agent card URL is refused: "
            f"{exc.reason}."
        ) from None
    from teams.engine import a2a_consult  # the a2a-sdk only once an A2A agent is asked

    started = time.monotonic()
    answer = a2a_consult.ask(
        name=profile.name,
        url=profile.a2a_url,
        token=profile_key(profile),
        text=frame.prompt,
        seconds=A2A_TIMEOUT_SECONDS,
    )
    if answer.asks:
        notes = (
            f"The A2A agent asks this back (its task {answer.task_id} waits for input). "
            "A consultation does not answer it: ask again with the answer in your prompt."
        )
    else:
        task = f"task {answer.task_id} completed" if answer.task_id else "a direct message"
        notes = f"Answered over A2A ({task})."
    data = {
        "answer": answer.text,
        "confidence": 0.5,  # required by PeerOutput; an A2A agent gives none (not shown)
        "key_points": [],
        "suggested_actions": [],
        "file_references": [],
        "execution_notes": notes,
    }
    return StructuredReply(data, profile.model, Usage(), time.monotonic() - started)


def _guards(profile: ConsultantProfile) -> bool:
    """Do a profile's requests go through the outbound guard? Those to a base URL a
    person gave do, unless it is a `local` endpoint's."""
    if profile.provider == ConsultantProfile.Provider.OFFLINE or not profile.base_url:
        return False
    return not getattr(profile, "local_endpoint", False)


def _through_endpoint(profile: ConsultantProfile) -> ConsultantProfile:
    """A profile whose model is an `ENDPOINT/MODEL` id, as the unsaved profile that
    reaches that endpoint (its API, URL and key variable, the endpoint's own model
    name); any other profile as it is."""
    endpoint = endpoint_of(profile)
    if endpoint is None:
        return profile
    asked = ConsultantProfile(
        name=profile.name,
        provider=endpoint.api,
        model=endpoints.route(profile.model).model,
        base_url=endpoint.url(),
        key_env=endpoint.key_env,
        strengths=profile.strengths,
        extra_prompt=profile.extra_prompt,
    )
    asked.local_endpoint = endpoint.local
    asked.endpoint_headers = endpoint.headers()
    return asked


def _anthropic(profile: ConsultantProfile, frame: PeerFrame) -> StructuredReply:
    # The SDKs are imported on the first consultation, not with this module (see
    # teams.engine.providers._anthropic).
    import anthropic

    client = _client(
        "anthropic",
        profile_key(profile),
        profile.base_url or settings.ANTHROPIC_BASE_URL,
        lambda key, url: anthropic.Anthropic(
            api_key=key or "none",  # a keyless local endpoint ignores it
            base_url=url,
            max_retries=2,
            timeout=TIMEOUT_SECONDS,
            default_headers=getattr(profile, "endpoint_headers", None) or None,
            http_client=(
                _guarded()
                if _guards(profile)
                else telemetry.http_client(anthropic.DefaultHttpxClient)
            ),
        ),
        guarded=_guards(profile),
    )
    try:
        message = client.messages.create(
            model=profile.model,
            max_tokens=OUTPUT_TOKENS,
            system=frame.system,
            messages=[{"role": "user", "content": frame.prompt}],
            tools=[
                {
                    "name": TOOL_NAME,
                    "description": "Give your answer in this structure.",
                    "input_schema": peer_output_schema(),
                }
            ],
            tool_choice={"type": "tool", "name": TOOL_NAME},
        )
    except anthropic.APIStatusError as exc:
        raise ModelError(describe_status_error(exc)) from exc
    except anthropic.APIError as exc:
        raise ModelError(_cannot_ask(profile, exc)) from exc
    usage = Usage(
        input_tokens=message.usage.input_tokens or 0,
        output_tokens=message.usage.output_tokens or 0,
        cache_creation_tokens=getattr(message.usage, "cache_creation_input_tokens", 0) or 0,
        cache_read_tokens=getattr(message.usage, "cache_read_input_tokens", 0) or 0,
    )
    uses = [b for b in message.content if b.type == "tool_use"]
    reply = StructuredReply(
        uses[0].input if uses else None, message.model or profile.model, usage, 0
    )
    if message.stop_reason == "max_tokens":
        reply.problem = f"the reply was cut off at {OUTPUT_TOKENS} tokens"
    elif not uses:
        reply.problem = "the reply did not use the PeerOutput structure"
    return reply


def _openai(profile: ConsultantProfile, frame: PeerFrame) -> StructuredReply:
    import openai

    client = _client(
        "openai",
        profile_key(profile),
        profile.base_url or None,
        lambda key, url: openai.OpenAI(
            api_key=key or "none",  # a keyless local endpoint ignores it
            base_url=url,
            max_retries=2,
            timeout=TIMEOUT_SECONDS,
            default_headers=getattr(profile, "endpoint_headers", None) or None,
            http_client=_guarded() if _guards(profile) else None,
        ),
        guarded=_guards(profile),
    )
    try:
        completion = client.chat.completions.create(
            model=profile.model,
            max_tokens=OUTPUT_TOKENS,
            messages=[
                {"role": "system", "content": frame.system},
                {"role": "user", "content": frame.prompt},
            ],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "PeerOutput", "strict": True, "schema": strict_schema()},
            },
        )
    except openai.APIStatusError as exc:
        raise ModelError(f"{profile.name} returned HTTP {exc.status_code}: {exc.message}") from exc
    except openai.APIError as exc:
        raise ModelError(_cannot_ask(profile, exc)) from exc
    usage = completion.usage
    reply = StructuredReply(
        None,
        completion.model or profile.model,
        Usage(
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        ),
        0,
    )
    choice = completion.choices[0] if completion.choices else None
    text = (choice.message.content or "") if choice else ""
    if choice is not None and choice.finish_reason == "length":
        reply.problem = f"the reply was cut off at {OUTPUT_TOKENS} tokens"
        return reply
    try:
        reply.data = json.loads(text)
    except json.JSONDecodeError:
        reply.problem = "the reply was not JSON"
    return reply


def _offline(profile: ConsultantProfile, frame: PeerFrame) -> StructuredReply:
    """A deterministic PeerOutput that says it is offline, seen through the profile's
    strengths, so the demo consults with no key."""
    asked = frame.prompt.split(" is asking for your help with: ", 1)[-1].split("\n", 1)[0]
    lens = profile.strengths or "general engineering"
    files = [line[4:-4] for line in frame.prompt.splitlines() if line.startswith("--- ")]
    data = {
        "answer": (
            f"(offline model) Looking at this through {lens}: {asked[:200]} Start with the "
            "smallest version that works, and check it against the goal before adding more."
        ),
        "confidence": 0.5,
        "key_points": [f"Seen through {lens}.", "Keep the first step small and testable."],
        "suggested_actions": [
            {
                "action": "Write down the one case that must work first",
                "priority": "high",
                "rationale": "It fixes what done means before any code",
            }
        ],
        "file_references": [
            {"path": path, "relevance": "named as relevant by the asker"} for path in files
        ],
        "execution_notes": "Offline consultant: no model was called.",
    }
    return StructuredReply(data, profile.model, Usage(len(frame.prompt) // 4, 200), 0)


CALLS = {
    ConsultantProfile.Provider.ANTHROPIC: _anthropic,
    ConsultantProfile.Provider.OPENAI: _openai,
    ConsultantProfile.Provider.OFFLINE: _offline,
}

_lock = threading.Lock()
_clients: dict[tuple, object] = {}


def _client(kind: str, key: str, base_url: str | None, make, *, guarded: bool = False):
    """One SDK client per (vendor, key, endpoint), shared by threads (both SDKs are
    thread-safe)."""
    with _lock:
        found = (kind, key, base_url, guarded, telemetry.enabled())
        if found not in _clients:
            _clients[found] = make(key, base_url)
        return _clients[found]


def _guarded():
    """The HTTP client for a profile's own base URL (a URL a person gave): the outbound
    guard's (teams.lib.outbound), each request ending within TIMEOUT_SECONDS as a whole,
    answers cut off past MAX_ANSWER_BYTES, no redirects followed."""
    return outbound.client(
        timeout=TIMEOUT_SECONDS, total_timeout=TIMEOUT_SECONDS, max_response_bytes=MAX_ANSWER_BYTES
    )


def _cannot_ask(profile: ConsultantProfile, exc: Exception) -> str:
    refused = outbound.refusal_in(exc)
    if refused:
        return f"Consultant {profile.name} is not asked: its base URL is refused: {refused}."
    return f"Could not ask {profile.name}: {exc}"
