"""The agent loop: one Turn, claimed by one worker, run to its end.

Call the model, run the tool calls, feed the results back, repeat until the model
ends its turn, a tool's result ends it (a TurnEnd value: pass, ask the PM, phase
complete) or the step limit is hit. Every model response and every tool result is
a TurnStep written as it happens, the tool's TurnEnd with it, so a turn picked up
again after a crash replays its steps instead of repeating model or tool calls (the
response that ends the turn is written with the turn's finish, in its transaction)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from functools import partial

from django.db import InterfaceError, OperationalError, transaction

from teams import services
from teams.conversation import approvals, hierarchy, keepers
from teams.engine import claims, history_kept, prompts
from teams.engine.consult import consult
from teams.engine.providers import caches_prompts, provider_for, replaying
from teams.engine.reply import invalid_arguments_error
from teams.errors import Conflict, ModelError
from teams.history.model_requests import request_packed
from teams.live import events
from teams.models import (
    DENY,
    Agent,
    ApprovalPolicy,
    Message,
    ModelCall,
    PMRequest,
    Team,
    Turn,
    TurnStep,
)
from teams.observability import telemetry
from teams.run import budgets, turns
from teams.run.usage import model_call_record, turn_add_usage
from tools import registry
from tools.base import ToolContext, ToolResult, TurnEnd
from tools.context import ContextRetrieve

log = logging.getLogger("loom.loop")

MAX_STEPS = 8  # model calls per turn
DELTA_FLUSH_CHARS = 80
DELTA_FLUSH_SECONDS = 0.1


def run_turn(turn_id: int, worker: str) -> Turn | None:
    """Claim and run a turn; None when another worker has it, or when a replay runs
    its team (teams.engine.replay answers its model calls; no worker may)."""
    turn = turns.turn_claim(
        turn_id,
        worker,
        replay_runs_it=replaying.get() is not None,
        annotate=claims.claim_annotations,
    )
    if turn is None:
        return None
    with telemetry.turn_span(turn) as span:  # invoke_agent <agent>
        try:
            execute(turn, worker)
        except (OperationalError, InterfaceError) as exc:
            # The database went away (its connection killed): not the turn's fault. The
            # lease is no longer renewed, so the sweeper re-queues the turn and it resumes.
            span.crashed(exc)
            raise
        except Exception as exc:  # a bug: record it on the turn, keep the worker alive
            log.exception("Turn %s crashed", turn.id)
            # An OSError names its strerror only: its filename is a place on the server.
            said = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            turns.turn_fail(
                turn=turn, worker=worker, error=f"Internal error: {type(exc).__name__}: {said}"
            )
        if turn.status == Turn.Status.RUNNING:  # turn_finish keeps the copy up to date
            turn.refresh_from_db()
        span.finish(turn)
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
        with telemetry.chat(
            model=model,
            max_tokens=max_tokens,
            system=request["system"],
            messages=request["messages"],
            purpose=ModelCall.Purpose.SMART_RETRIEVAL,
        ) as call:
            reply = call.reply(
                provider_for(model, purpose=ModelCall.Purpose.SMART_RETRIEVAL).respond(
                    model=model, max_tokens=max_tokens, **request
                )
            )
        model_call_record(
            team=team,
            turn=turn,
            agent=agent,
            model=reply.model,
            usage=reply.usage,
            purpose=ModelCall.Purpose.SMART_RETRIEVAL,
            reply=reply.text,
        )
        return reply.text

    return ask_model


def tool_context(
    *, team: Team, agent: Agent, turn: Turn | None = None, messages=None
) -> ToolContext:
    """The context a tool call runs with; one-off model questions are asked with the
    agent's model."""
    model = turn.model if turn is not None and turn.model else agent.effective_model
    replay = replaying.get()
    return ToolContext(
        team=team,
        agent=agent,
        turn=turn,
        messages=list(messages or []),
        ask_model=model_asker(model=model, team=team, turn=turn, agent=agent),
        consult=consult,
        call_mcp=_call_mcp,
        replayed=replay.recorded_result if replay is not None else None,
    )


def _list_new_mcp_servers(turn: Turn) -> bool:
    """A server added without its tools listed (an API call, the admin, a script) is
    listed before the turn's prompt, so the turn offers its tools with no refresh. The
    claim's stamp says whether one is unlisted: no query for a team without one."""
    if replaying.get() is not None:  # a replay contacts no server; its copy's listings answer
        return False
    rows = json.loads(getattr(turn, "prompt_mcp", None) or "[]")
    if not any(row[-1] is None for row in rows):  # each row ends with its listed_at
        return False
    from teams.engine import mcp_client

    return mcp_client.list_unlisted(turn.team_id) > 0


def _call_mcp(server, tool: str, arguments: dict):
    # Imported on the first call: the MCP SDK costs nothing to a team without servers.
    from teams.engine import mcp_client

    with telemetry.mcp_call(server, tool):  # a child of the tool's execute_tool span
        return mcp_client.call_tool(server, tool, arguments)


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
    hierarchy.agent_phase_begin(agent=agent, team=team, phase=turn.phase)
    claimed = claims.claimed(turn)
    if not steps and _list_new_mcp_servers(turn):
        claimed = None  # a server's tools just listed: what the claim read is older
    prompt = prompts.build(
        agent, team, until_id=turn.snapshot_message_id, phase=turn.phase, claimed=claimed
    )
    if turn.attempts == 1:
        prompt = _offload_when_over_budget(turn, prompt)
    tools, definitions = _turn_tools(agent, team, claimed, prompt.snapshot)
    run = _Run(
        turn=turn,
        worker=worker,
        prompt=prompt,
        tools=tools,
        definitions=definitions,
        ctx=tool_context(team=team, agent=agent, turn=turn, messages=prompt.snapshot),
        messages=prompts.request_messages(prompt, cached=caches_prompts(turn.model)),
        resumed=bool(steps),
        relay=_TextRelay(turn),
    )
    last_model, run.replies, results, run.model_calls = _replay(steps, run.messages)
    run.next_index = len(steps)
    ended: TurnEnd | None = None
    while True:
        if last_model is not None:
            if not any(b.get("type") == "tool_use" for b in last_model):
                break
            ended = _run_tool_calls(run, last_model, results)
            if ended is _WAITING:
                return
            results = {}
            if ended is not None:
                break
        last_model = _next_reply(run)
        if last_model is None:
            return
    turns.turn_finish(
        turn=turn,
        worker=worker,
        text=_message(run.replies),
        outcome=ended.outcome if ended else None,
        reason=ended.reason if ended else "",
        final_call=run.final_call,
    )


@dataclass
class _Run:
    """One attempt at a turn: what its calls are made with, and what they gave."""

    turn: Turn
    worker: str
    prompt: prompts.Prompt
    tools: list
    definitions: list[dict]
    ctx: ToolContext
    messages: list[dict]  # the request's messages, growing with each call and result
    resumed: bool  # it replayed an earlier attempt's steps
    relay: _TextRelay
    replies: list[list[dict]] = field(default_factory=list)  # every response's content
    model_calls: int = 0
    next_index: int = 0  # the next step's index
    claimed: bool = True  # the rows the claim read serve this attempt's first call
    final_call: turns.FinalCall | None = None  # the call that ended the turn


_WAITING = TurnEnd(Turn.Outcome.MESSAGE, "waiting for the PM")  # the turn stopped, unfinished


def _run_tool_calls(run: _Run, model_content: list[dict], results: dict) -> TurnEnd | None:
    """Run the tool calls of one response (those without a result yet); how the turn
    ends, None when it goes on, or _WAITING when a call waits for the PM."""
    turn = run.turn
    uses = [b for b in model_content if b.get("type") == "tool_use"]
    run.ctx.said = _said([model_content])
    for use in uses:
        if use["id"] in results:
            continue
        record = partial(_record_tool_step, turn, run.next_index, use)
        verdict = _approval(turn, run.tools, use, model_content, resumed=run.resumed)
        if verdict.wait:  # no worker holds the turn while the PM decides
            run.relay.flush()
            turns.turn_wait(turn=turn, worker=run.worker)
            return _WAITING
        if verdict.result is not None:
            with transaction.atomic():
                record(verdict.result)
            results[use["id"]] = verdict.result
        else:
            results[use["id"]] = _call_tool(run, use, verdict, record)
        run.next_index += 1
    run.messages.append({"role": "user", "content": _blocks(model_content, results)})
    # The first call whose result ends the turn decides how it ends.
    ended = next((results[u["id"]].ends_turn for u in uses if results[u["id"]].ends_turn), None)
    run.prompt = prompts.with_current_anchors(run.prompt, turn.team)
    if ended is None and run.model_calls >= MAX_STEPS:
        ended = TurnEnd(Turn.Outcome.MESSAGE, f"step limit ({MAX_STEPS} model calls)")
    return ended


def _call_tool(run: _Run, use: dict, verdict: _Verdict, record) -> ToolResult:
    """One tool call run through the registry, its step recorded with its result."""
    noted = partial(_noted, verdict.notice)
    tool = next((t for t in run.tools if t.name == use["name"]), None)
    with telemetry.tool_call(use, tool) as call:  # execute_tool <tool>
        result = registry.execute(
            use["name"],
            verdict.arguments,
            replace(run.ctx, tool_use_id=use["id"]),  # a replay finds the call's record by it
            run.tools,
            record=lambda result: record(noted(result)),
        )
        return call.done(noted(result))


def _next_reply(run: _Run) -> list[dict] | None:
    """Ask the model for the next response; its content, or None when the turn
    stopped (a budget the call would cross, or a failed call)."""
    turn = run.turn
    # What the model reads, kept with the step it answers (teams.history.model_requests).
    request = {
        "model": turn.model,
        "max_tokens": turn.agent.max_tokens_for(turn.model),
        "system": run.prompt.system,
        "messages": run.messages,
        "tools": run.definitions,
    }
    if budgets.call_blocked(turn=turn, claimed=run.claimed, **request):
        # The call would cross a cost budget: not made, the team waits for the PM.
        _end_over_budget(turn, run.worker, run.replies)
        return None
    run.claimed = False
    reply = _ask_model(turn, run.worker, request, run.relay)
    if reply is None:
        return None
    run.final_call = _recorded_call(turn, request, reply, run.next_index)
    run.next_index += 1
    run.model_calls += 1
    run.messages.append({"role": "assistant", "content": reply.content})
    run.replies.append(reply.content)
    return reply.content


@dataclass(frozen=True)
class _Verdict:
    """What happens to one tool call: run with `arguments`, answer with `result`
    (denied, or it could not be asked), or `wait` for the PM."""

    arguments: dict | None = None
    result: ToolResult | None = None
    wait: bool = False
    notice: str = ""


def _approval(turn: Turn, tools, use: dict, model_content: list[dict], resumed: bool) -> _Verdict:
    """A call of an `ask` tool waits for the PM's approval, once per call: the
    request is asked, then its answer decides when the turn resumes. A resumed turn
    (`resumed`: it replayed steps) heeds the answer even when the tool no longer asks
    (the PM's Always approve made it auto): its note, its edited arguments."""
    invalid = invalid_arguments_error(use)  # an OpenAI-style reply's arguments, not JSON
    if invalid:
        return _Verdict(result=ToolResult(invalid, is_error=True))
    arguments = use.get("input") or {}
    tool = next((t for t in tools if t.name == use["name"]), None)
    asks = tool is not None and registry.policy(tool, turn.team) == ApprovalPolicy.ASK
    if not asks and not (resumed and tool is not None):
        return _Verdict(arguments=arguments)
    request = approvals.approval_for(turn, use["id"])
    if not asks and (request is None or request.status != PMRequest.Status.ANSWERED):
        return _Verdict(arguments=arguments)
    if request is None:
        try:
            approvals.approval_request_open(
                turn=turn,
                tool=use["name"],
                tool_use_id=use["id"],
                arguments=arguments,
                input_schema=tool.definition_for(turn.team)["input_schema"],
                why=_said([model_content]),
            )
        except Conflict as exc:
            return _Verdict(result=ToolResult(f"Error: {exc.message}", is_error=True))
        return _Verdict(wait=True)
    if request.status == PMRequest.Status.OPEN:
        return _Verdict(wait=True)
    decision, edited, note = approvals.approval_outcome(request)
    if request.status != PMRequest.Status.ANSWERED:
        text = "Error: this call did not run: its approval request was cancelled."
        return _Verdict(result=ToolResult(text, is_error=True))
    if decision == DENY:
        return _Verdict(result=ToolResult(approvals.denied_text(note), is_error=True))
    notice = approvals.approved_notice(request, arguments)
    return _Verdict(arguments=edited if edited is not None else arguments, notice=notice)


def _noted(notice: str, result: ToolResult) -> ToolResult:
    """What the PM changed or said, before the call's result."""
    return replace(result, text=notice + result.text) if notice else result


def _turn_tools(agent: Agent, team: Team, claimed: claims.Claimed | None = None, messages=None):
    """The agent's tools now and their definitions, the last marked for the cache (as
    this process built them while what the turn's claim read of them is unchanged);
    with `messages`, the turn's history, only those that can do something in it."""
    stamp = claimed.tools if claimed is not None and history_kept.KEEP_HISTORY else None
    tools, definitions = registry.turn_toolset(agent, team, stamp, messages)
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


def _ask_model(turn: Turn, worker: str, request: dict, relay: _TextRelay):
    """One model call; None when it failed (the turn is failed then, and the team
    paused)."""
    try:
        with telemetry.chat(
            model=turn.model,
            max_tokens=request["max_tokens"],
            system=request["system"],
            messages=request["messages"],
        ) as call:  # chat <model>
            reply = call.reply(
                provider_for(turn.model).respond(
                    model=turn.model,
                    system=request["system"],
                    messages=request["messages"],
                    tools=request["tools"],
                    max_tokens=request["max_tokens"],
                    on_text=relay,
                )
            )
    except ModelError as exc:
        relay.flush()
        turns.turn_fail(turn=turn, worker=worker, error=exc.message)
        return None
    relay.flush()
    return reply


def _recorded_call(turn: Turn, request: dict, reply, index: int) -> turns.FinalCall | None:
    """Keep a model call as the turn's step, with its request and usage. A reply that
    calls no tool ends the turn: it is kept in the finish's transaction (returned);
    one that calls tools is kept now, before they run."""
    packed, digest = request_packed(request)
    record = partial(
        TurnStep.objects.create,
        turn=turn,
        index=index,
        kind=TurnStep.Kind.MODEL,
        content=reply.content,
        request=packed,
        request_digest=digest,
        **reply.usage.as_fields(),
    )
    if not any(b.get("type") == "tool_use" for b in reply.content):
        return turns.FinalCall(record=record, model=reply.model, usage=reply.usage)
    with transaction.atomic():
        record()
        turn_add_usage(turn=turn, model=reply.model, usage=reply.usage, renew_lease=turns.lease())
    return None


def _message(replies: list[list[dict]]) -> str:
    """The turn's message: the text of the response that ended it. The text beside
    an earlier response's tool calls is the agent's working notes (kept with its
    steps: the live view streams it and the turn page shows it), not a second copy
    in the conversation."""
    return _said(replies[-1:])


def _said(replies: list[list[dict]]) -> str:
    """The text of model responses, one paragraph each."""
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
    text = _message(replies)
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
    return chars // keepers.CHARS_PER_TOKEN


def _offload_when_over_budget(turn: Turn, prompt: prompts.Prompt) -> prompts.Prompt:
    """Before the first model call, keep the context under the agent's budget."""
    agent, team = turn.agent, turn.team
    for _ in range(keepers.AUTO_OFFLOAD_ROUNDS):
        tokens = estimate_tokens(prompt)
        if not keepers.over_budget(agent, tokens):
            break
        result = keepers.offload_for_budget(
            turn=turn, messages=prompt.snapshot, tokens=tokens, retrieve_tool=ContextRetrieve.name
        )
        if result is None:
            break
        log.info("Turn %s: offloaded %s messages of %s", turn.id, result.count, agent.name)
        # Built afresh: what the claim read (who passed, the roster) was for the
        # snapshot before the offload moved it.
        prompt = prompts.build(agent, team, until_id=turn.snapshot_message_id, phase=turn.phase)
    return prompt
