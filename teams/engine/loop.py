"""The agent loop: one Turn, claimed by one worker, run to its end.

Call the model, run the tool calls, feed the results back, repeat until the model
ends its turn, a tool's result ends it (a TurnEnd value: pass, ask the PM, phase
complete) or the step limit is hit. Every model response and every tool result is
a TurnStep written as it happens, the tool's TurnEnd with it, so a turn picked up
again after a crash replays its steps instead of repeating model or tool calls."""

from __future__ import annotations

import logging
import time
from functools import partial

from django.db import InterfaceError, OperationalError, transaction

from teams import budgets, events, keepers, mesh, services, turns
from teams.engine import prompts
from teams.engine.consult import consult
from teams.engine.providers import caches_prompts, provider_for
from teams.engine.reply import DEFAULT_MAX_TOKENS
from teams.errors import ModelError
from teams.models import Agent, Message, ModelCall, Team, Turn, TurnStep
from teams.requests import request_pack
from teams.usage import model_call_record, turn_add_usage
from tools import registry
from tools.base import ToolContext, ToolResult, TurnEnd
from tools.context import ContextRetrieve

log = logging.getLogger("loom.loop")

MAX_STEPS = 8  # model calls per turn
DELTA_FLUSH_CHARS = 80
DELTA_FLUSH_SECONDS = 0.1


def run_turn(turn_id: int, worker: str) -> Turn | None:
    """Claim and run a turn; None when another worker has it."""
    turn = turns.turn_claim(turn_id, worker)
    if turn is None:
        return None
    try:
        execute(turn, worker)
    except (OperationalError, InterfaceError):
        # The database went away (its connection killed): not the turn's fault. The
        # lease is no longer renewed, so the sweeper re-queues the turn and it resumes.
        raise
    except Exception as exc:  # a bug: record it on the turn, keep the worker alive
        log.exception("Turn %s crashed", turn.id)
        turns.turn_fail(
            turn=turn, worker=worker, error=f"Internal error: {type(exc).__name__}: {exc}"
        )
    turn.refresh_from_db()
    return turn


class _TextRelay:
    """Batches streamed text into few live events."""

    def __init__(self, turn: Turn):
        self.turn, self.buffer, self.last = turn, "", time.monotonic()

    def __call__(self, text: str) -> None:
        self.buffer += text
        if (
            len(self.buffer) >= DELTA_FLUSH_CHARS
            or time.monotonic() - self.last > DELTA_FLUSH_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            events.publish(
                events.TextDelta(
                    turn_id=self.turn.id, agent=self.turn.agent.name, text=self.buffer
                ),
                team_id=self.turn.team_id,
            )
        self.buffer, self.last = "", time.monotonic()


def model_asker(*, model: str, team: Team, turn: Turn | None = None, agent: Agent | None = None):
    """One-off questions to `model` (smart retrieval), (system, prompt, max tokens) ->
    text; the usage is counted on the turn, or on the team when there is none (a tool
    run through the API), and recorded as a ModelCall.

    Each question passes the pre-call check first (budgets.call_refusal): a model with
    no price, or a call that would cross the team's or the agent's cost budget, is not
    asked; the latter pauses the team with a budget request, as a turn's call does. The
    refusal is a ModelError, which the tool answers as "Error: ..."."""

    def ask_model(system: str, prompt: str, max_tokens: int) -> str:
        request = {
            "system": [{"type": "text", "text": system}],
            "messages": [{"role": "user", "content": prompt}],
            "tools": [],
        }
        who = f"of {agent.name}" if agent is not None else "through the API"
        _, refusal = budgets.call_refusal(
            team=team,
            agent=agent,
            model=model,
            max_tokens=max_tokens,
            about=f"A smart retrieval {who}",
            **request,
        )
        if refusal is not None:
            refusal.stop(team)
            raise ModelError(refusal.text.removeprefix("Error: "))
        reply = provider_for(model).respond(model=model, max_tokens=max_tokens, **request)
        model_call_record(
            team=team,
            turn=turn,
            agent=agent,
            model=reply.model,
            usage=reply.usage,
            purpose=ModelCall.Purpose.SMART_RETRIEVAL,
        )
        return reply.text

    return ask_model


def tool_context(
    *, team: Team, agent: Agent, turn: Turn | None = None, messages=None
) -> ToolContext:
    """The context a tool call runs with; one-off model questions are asked with the
    agent's model."""
    model = turn.model if turn is not None and turn.model else agent.effective_model
    return ToolContext(
        team=team,
        agent=agent,
        turn=turn,
        messages=list(messages or []),
        ask_model=model_asker(model=model, team=team, turn=turn, agent=agent),
        consult=consult,
    )


def _replayed(step: TurnStep) -> ToolResult:
    block = step.content[0]
    end = TurnEnd(Turn.Outcome(step.ends_turn), step.end_reason) if step.ends_turn else None
    return ToolResult(block.get("content", ""), bool(block.get("is_error")), end)


def execute(turn: Turn, worker: str) -> None:
    team, agent = turn.team, turn.agent
    # Steps replay with the model that made them; a fresh turn uses the agent's
    # model as it is now (it may have changed since the turn was queued).
    steps = list(turn.steps.order_by("index")) if turn.attempts > 1 else []
    if not steps and turn.model != agent.effective_model:
        turn.model = agent.effective_model
        Turn.objects.filter(pk=turn.pk).update(model=turn.model)
    # Each phase begins with a trajectory Loom declares for the agent (once per phase).
    mesh.agent_phase_begin(agent=agent, team=team, phase=turn.phase)
    prompt = prompts.build(agent, team, until_id=turn.snapshot_message_id, phase=turn.phase)
    if turn.attempts == 1:
        prompt = _offload_when_over_budget(turn, prompt)
    tools, definitions = _turn_tools(agent, team)
    ctx = tool_context(team=team, agent=agent, turn=turn, messages=prompt.snapshot)
    messages = prompts.request_messages(prompt, cached=caches_prompts(turn.model))
    last_model, replies, results, model_calls = _replay(steps, messages)
    next_index = len(steps)
    relay = _TextRelay(turn)
    ended: TurnEnd | None = None

    while True:
        if last_model is not None:
            uses = [b for b in last_model if b.get("type") == "tool_use"]
            if not uses:
                break
            for use in uses:
                if use["id"] in results:
                    continue
                results[use["id"]] = registry.execute(
                    use["name"],
                    use.get("input") or {},
                    ctx,
                    tools,
                    record=partial(_record_tool_step, turn, next_index, use),
                )
                next_index += 1
            messages.append({"role": "user", "content": _blocks(last_model, results)})
            # The first call whose result ends the turn decides how it ends.
            ended = next(
                (results[u["id"]].ends_turn for u in uses if results[u["id"]].ends_turn), None
            )
            results = {}
            prompt = prompts.with_current_anchors(prompt, team)
            if ended is None and model_calls >= MAX_STEPS:
                ended = TurnEnd(Turn.Outcome.MESSAGE, f"step limit ({MAX_STEPS} model calls)")
            if ended is not None:
                break
        # What the model reads, kept with the step it answers (teams.requests).
        request = {
            "model": turn.model,
            "max_tokens": DEFAULT_MAX_TOKENS,
            "system": prompt.system,
            "messages": messages,
            "tools": definitions,
        }
        if budgets.call_blocked(turn=turn, **request):
            # The call would cross a cost budget: not made, the team waits for the PM.
            _end_over_budget(turn, worker, replies)
            return
        reply = _ask_model(turn, worker, request, relay, next_index)
        if reply is None:
            return
        next_index += 1
        model_calls += 1
        messages.append({"role": "assistant", "content": reply.content})
        last_model = reply.content
        replies.append(reply.content)

    turns.turn_finish(
        turn=turn,
        worker=worker,
        text=_said(replies),
        outcome=ended.outcome if ended else None,
        reason=ended.reason if ended else "",
    )


def _turn_tools(agent: Agent, team: Team):
    """The agent's tools now and their definitions, the last marked for the cache."""
    tools = registry.toolset(agent, team)
    definitions = registry.definitions(tools, team)
    if definitions:
        definitions[-1] = {**definitions[-1], "cache_control": {"type": "ephemeral"}}
    return tools, definitions


def _replay(steps: list[TurnStep], messages: list[dict]):
    """Replay what an earlier attempt already did into `messages`: (the last model
    response, every response's content, the last response's tool results by id, the
    model calls made)."""
    last_model: list[dict] | None = None
    replies: list[list[dict]] = []
    results: dict[str, ToolResult] = {}
    model_calls = 0
    for step in steps:
        if step.kind == TurnStep.Kind.MODEL:
            if results:
                messages.append({"role": "user", "content": _blocks(last_model, results)})
            messages.append({"role": "assistant", "content": step.content})
            last_model, results, model_calls = step.content, {}, model_calls + 1
            replies.append(step.content)
        else:
            results[step.content[0]["tool_use_id"]] = _replayed(step)
    return last_model, replies, results, model_calls


def _ask_model(turn: Turn, worker: str, request: dict, relay: _TextRelay, index: int):
    """One model call, kept as the turn's step with its request and usage; None when
    it failed (the turn is failed then, and the team paused)."""
    try:
        reply = provider_for(turn.model).respond(
            model=turn.model,
            system=request["system"],
            messages=request["messages"],
            tools=request["tools"],
            on_text=relay,
        )
    except ModelError as exc:
        relay.flush()
        turns.turn_fail(turn=turn, worker=worker, error=exc.message)
        return None
    relay.flush()
    with transaction.atomic():
        TurnStep.objects.create(
            turn=turn,
            index=index,
            kind=TurnStep.Kind.MODEL,
            content=reply.content,
            request=request_pack(request),
            **reply.usage.as_fields(),
        )
        turn_add_usage(turn=turn, model=reply.model, usage=reply.usage, renew_lease=turns.lease())
    return reply


def _said(replies: list[list[dict]]) -> str:
    """The text of a turn's model responses, one paragraph each."""
    return "\n\n".join(
        b["text"].strip()
        for content in replies
        for b in content
        if b.get("type") == "text" and b.get("text", "").strip()
    )


def _end_over_budget(turn: Turn, worker: str, replies: list[list[dict]]) -> None:
    """A turn stopped before a call its budget cannot pay: one that has not spoken is
    cancelled (the agent speaks first on resume); one that has keeps what it said."""
    if not replies:
        turns.turn_cancel(turn=turn, worker=worker)
        return
    text = _said(replies)
    turns.turn_finish(
        turn=turn, worker=worker, text=text, outcome=Turn.Outcome.MESSAGE, reason="cost budget"
    )


def _block(use_id: str, result: ToolResult) -> dict:
    block = {"type": "tool_result", "tool_use_id": use_id, "content": result.text}
    if result.is_error:
        block["is_error"] = True
    return block


def _blocks(model_content: list[dict], results: dict[str, ToolResult]) -> list[dict]:
    """The tool results of one model response, in the order of its calls."""
    uses = [b["id"] for b in model_content if b.get("type") == "tool_use"]
    return [_block(use_id, results[use_id]) for use_id in uses if use_id in results]


def _record_tool_step(turn: Turn, index: int, use: dict, result: ToolResult) -> None:
    """The step of one tool call, with how it ends the turn, if it does, and the
    call's line in the agent's record of its own actions (seen on its later turns in
    the phase: within this turn the model has the call and its result verbatim)."""
    if result.digest:
        services.message_add(
            team=turn.team,
            content=result.digest,
            kind=Message.Kind.TOOL_CALL,
            author=turn.agent,
            recipient=turn.agent,
            turn=turn,
            phase=turn.phase,
        )
    TurnStep.objects.create(
        turn=turn,
        index=index,
        kind=TurnStep.Kind.TOOL,
        tool_name=use["name"],
        content=[_block(use["id"], result)],
        ends_turn=result.ends_turn.outcome if result.ends_turn else "",
        end_reason=result.ends_turn.reason if result.ends_turn else "",
    )


def estimate_tokens(prompt: prompts.Prompt) -> int:
    """About four characters a token: close enough to decide when to offload."""
    chars = sum(len(b["text"]) for b in prompt.system)
    chars += sum(len(m["content"]) for m in prompt.messages if isinstance(m["content"], str))
    return chars // 4


def _offload_when_over_budget(turn: Turn, prompt: prompts.Prompt) -> prompts.Prompt:
    """Before the first model call, keep the context under the agent's budget."""
    agent, team = turn.agent, turn.team
    for _ in range(keepers.AUTO_OFFLOAD_ROUNDS):
        if not keepers.over_budget(agent, estimate_tokens(prompt)):
            break
        result = keepers.offload_for_budget(
            turn=turn, messages=prompt.snapshot, retrieve_tool=ContextRetrieve.name
        )
        if result is None:
            break
        log.info("Turn %s: offloaded %s messages of %s", turn.id, result.count, agent.name)
        prompt = prompts.build(agent, team, until_id=turn.snapshot_message_id, phase=turn.phase)
    return prompt
