"""The agent loop: one Turn, claimed by one worker, run to its end.

Call the model, run the tool calls, feed the results back, repeat until the model
ends its turn, a tool ends it (pass_turn, ask_pm, signal_phase_complete) or the
step limit is hit. Every model response and every tool result is a TurnStep
written as it happens, so a turn picked up again after a crash replays its steps
instead of repeating model calls or tool calls."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import transaction
from django.db.models import F, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from teams import conversation, drift, events, keepers, prompts, questions
from teams.model_client import ModelError, get_model
from teams.models import Message, Team, Turn, TurnStep
from teams.usage import turn_add_usage
from tools import registry
from tools.base import ToolContext

log = logging.getLogger("loom.loop")

MAX_STEPS = 8  # model calls per turn
LEASE = timedelta(minutes=5)
DELTA_FLUSH_CHARS = 80
DELTA_FLUSH_SECONDS = 0.1


def claim(turn_id: int, worker: str) -> Turn | None:
    """Take a queued turn. Exactly one of any number of racing workers gets it."""
    now = timezone.now()
    # The context snapshot is fixed at the first claim: a resumed turn sees what
    # the first attempt saw.
    newest = Message.objects.filter(team_id=OuterRef("team_id")).order_by("-id").values("id")[:1]
    claimed = Turn.objects.filter(pk=turn_id, status=Turn.Status.QUEUED).update(
        status=Turn.Status.RUNNING,
        claimed_by=worker,
        lease_expires_at=now + LEASE,
        attempts=F("attempts") + 1,
        started_at=now,
        snapshot_message_id=Coalesce(F("snapshot_message_id"), Subquery(newest), Value(0)),
    )
    if not claimed:
        return None
    return Turn.objects.select_related("team", "agent").get(pk=turn_id)


def run_turn(turn_id: int, worker: str) -> Turn | None:
    """Claim and run a turn; None when another worker has it."""
    turn = claim(turn_id, worker)
    if turn is None:
        return None
    try:
        execute(turn, worker)
    except Exception as exc:  # a bug: record it on the turn, keep the worker alive
        log.exception("Turn %s crashed", turn.id)
        fail(turn, worker, f"Internal error: {type(exc).__name__}: {exc}")
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
            events.publish_now(
                self.turn.team_id,
                "text.delta",
                turn_id=self.turn.id,
                agent=self.turn.agent.name,
                text=self.buffer,
            )
        self.buffer, self.last = "", time.monotonic()


def _still_mine(turn: Turn, worker: str):
    return Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING, claimed_by=worker)


def execute(turn: Turn, worker: str) -> None:
    team, agent = turn.team, turn.agent
    if turn.attempts == 1:
        events.publish(
            team.id, "turn.started", turn_id=turn.id, agent=agent.name, number=turn.number
        )
    prompt = prompts.build(agent, team, until_id=turn.snapshot_message_id, phase=turn.phase)
    if turn.attempts == 1:
        prompt = _offload_when_over_budget(turn, prompt)
    tools = registry.toolset(agent, team)
    definitions = registry.definitions(tools)
    if definitions:
        definitions[-1] = {**definitions[-1], "cache_control": {"type": "ephemeral"}}
    ctx = ToolContext(team=team, agent=agent, turn=turn, messages=prompt.snapshot)
    messages = list(prompt.messages)
    model = get_model()

    # Replay what an earlier attempt already did.
    steps = list(turn.steps.order_by("index")) if turn.attempts > 1 else []
    last_model: list[dict] | None = None
    replies: list[list[dict]] = []  # every model response's content, in order
    results: list[dict] = []
    model_calls = 0
    for step in steps:
        if step.kind == TurnStep.Kind.MODEL:
            if results:
                messages.append({"role": "user", "content": results})
            messages.append({"role": "assistant", "content": step.content})
            last_model, results, model_calls = step.content, [], model_calls + 1
            replies.append(step.content)
        else:
            results.extend(step.content)
    next_index = len(steps)
    relay = _TextRelay(turn)

    while True:
        if last_model is not None:
            uses = [b for b in last_model if b.get("type") == "tool_use"]
            if not uses:
                break
            done = {r["tool_use_id"] for r in results}
            for use in uses:
                if use["id"] in done:
                    continue
                result = registry.execute(use["name"], use.get("input") or {}, ctx, tools)
                block = {"type": "tool_result", "tool_use_id": use["id"], "content": result.text}
                if result.is_error:
                    block["is_error"] = True
                TurnStep.objects.create(
                    turn=turn,
                    index=next_index,
                    kind=TurnStep.Kind.TOOL,
                    tool_name=use["name"],
                    content=[block],
                )
                next_index += 1
                results.append(block)
            messages.append({"role": "user", "content": results})
            ended = _ending_call(uses, results)
            results = []
            if ended:
                ctx.ended_by, ctx.end_reason = ended
                break
            if model_calls >= MAX_STEPS:
                ctx.ended_by = "step_limit"
                break
        try:
            reply = model.respond(
                model=turn.model or agent.effective_model,
                system=prompt.system,
                messages=messages,
                tools=definitions,
                on_text=relay,
            )
        except ModelError as exc:
            relay.flush()
            fail(turn, worker, str(exc))
            return
        relay.flush()
        with transaction.atomic():
            TurnStep.objects.create(
                turn=turn,
                index=next_index,
                kind=TurnStep.Kind.MODEL,
                content=reply.content,
                **reply.usage.as_fields(),
            )
            turn_add_usage(turn, reply, renew_lease=LEASE)
        next_index += 1
        model_calls += 1
        messages.append({"role": "assistant", "content": reply.content})
        last_model = reply.content
        replies.append(reply.content)

    text = "\n\n".join(
        b["text"].strip()
        for content in replies
        for b in content
        if b.get("type") == "text" and b.get("text", "").strip()
    )
    finish(turn, worker, ctx, text)


def _ending_call(uses: list[dict], results: list[dict]) -> tuple[str, str] | None:
    """(tool name, reason) of the first successful turn-ending call, if any."""
    failed = {r["tool_use_id"] for r in results if r.get("is_error")}
    for use in uses:
        tool = registry.get(use["name"])
        if tool is not None and tool.ends_turn and use["id"] not in failed:
            arguments = use.get("input") or {}
            reason = next((str(v) for v in arguments.values()), "")
            return use["name"], reason
    return None


@transaction.atomic
def finish(turn: Turn, worker: str, ctx: ToolContext, text: str) -> None:
    """Log the turn's outcome in the conversation and hand over the floor, at once."""
    agent, team = turn.agent, turn.team
    if ctx.ended_by == "pass_turn" or (not text and not ctx.ended_by):
        reason = ctx.end_reason if ctx.ended_by == "pass_turn" else "no response"
        outcome = Turn.Outcome.PASS
        conversation.post(
            team,
            f"({agent.name} passes: {reason})",
            kind=Message.Kind.PASS_NOTE,
            author=agent,
            turn=turn,
            phase=turn.phase,
        )
    elif ctx.ended_by == "ask_pm":
        outcome = Turn.Outcome.PM_REQUEST
        content = text or f"(Requesting PM input: {ctx.end_reason})"
        conversation.post(team, content, author=agent, turn=turn, phase=turn.phase)
    else:
        outcome = (
            Turn.Outcome.PHASE_COMPLETE
            if ctx.ended_by == "signal_phase_complete"
            else Turn.Outcome.MESSAGE
        )
        if text:
            conversation.post(team, text, author=agent, turn=turn, phase=turn.phase)
    finished_at = timezone.now()
    agent.turns += 1  # as turn_finished counts it, so the score includes this turn
    turn.drift_score = drift.score(agent)
    owned = _still_mine(turn, worker).update(
        status=Turn.Status.DONE,
        outcome=outcome,
        finished_at=finished_at,
        lease_expires_at=None,
        drift_score=turn.drift_score,
    )
    if not owned:
        # The lease expired and another worker took the turn over: it will log it.
        transaction.set_rollback(True)
        log.warning("Turn %s was taken over by another worker; dropping this result", turn.id)
        return
    turn.status, turn.outcome, turn.finished_at = Turn.Status.DONE, outcome, finished_at
    conversation.turn_finished(turn=turn)
    if turn.purpose == Turn.Purpose.INBOX and questions.pending_inbox(
        agent, turn.snapshot_message_id or 0
    ):
        questions.wake_for_inbox(agent)  # queries that arrived during this turn


AUTO_OFFLOAD_AT = 0.8
AUTO_OFFLOAD_ROUNDS = 3


def estimate_tokens(prompt: prompts.Prompt) -> int:
    """About four characters a token: close enough to decide when to offload."""
    chars = sum(len(b["text"]) for b in prompt.system)
    chars += sum(len(m["content"]) for m in prompt.messages if isinstance(m["content"], str))
    return chars // 4


def _offload_when_over_budget(turn: Turn, prompt: prompts.Prompt) -> prompts.Prompt:
    """Before the first model call: over 80% of the agent's context budget, the oldest
    part goes to a keeper at a topic boundary and the agent is told in one line."""
    agent, team = turn.agent, turn.team
    for _ in range(AUTO_OFFLOAD_ROUNDS):
        if estimate_tokens(prompt) <= agent.context_budget_tokens * AUTO_OFFLOAD_AT:
            break
        chunk, _rest = keepers.split_at_topic_boundary(prompt.snapshot)
        if not chunk:
            break
        with transaction.atomic():
            result = keepers.offload(agent=agent, messages=chunk, topic=keepers.topic_of(chunk))
            note = conversation.post(
                team,
                f"(Context note) {result.count} older messages were offloaded to keeper "
                f"{result.keeper.id} ('{result.keeper.topic}') to stay within your context "
                "budget; use context_retrieve to recall them.",
                kind=Message.Kind.SYSTEM,
                author_label="system",
                recipient=agent,
                turn=turn,
            )
            Turn.objects.filter(pk=turn.pk).update(snapshot_message_id=note.id)
        turn.snapshot_message_id = note.id
        log.info("Turn %s: offloaded %s messages of %s", turn.id, result.count, agent.name)
        prompt = prompts.build(agent, team, until_id=note.id, phase=turn.phase)
    return prompt


@transaction.atomic
def fail(turn: Turn, worker: str, error: str) -> None:
    """Record the error, tell the team, and pause it so the PM can look before retrying."""
    owned = _still_mine(turn, worker).update(
        status=Turn.Status.FAILED,
        outcome=Turn.Outcome.ERROR,
        error=error,
        finished_at=timezone.now(),
        lease_expires_at=None,
    )
    if not owned:
        return
    team = Team.objects.select_for_update().get(pk=turn.team_id)
    conversation.post(
        team,
        f"The turn of {turn.agent.name} failed: {error}. The team is paused; resume to retry.",
        kind=Message.Kind.SYSTEM,
        author_label="system",
        turn=turn,
    )
    if team.status in (Team.Status.RUNNING, Team.Status.AWAITING_PM):
        conversation.set_status(team, Team.Status.PAUSED)
    turn.refresh_from_db()
    events.publish(team.id, "turn.finished", **conversation.turn_finished_payload(turn, team))
