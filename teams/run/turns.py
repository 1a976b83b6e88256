"""Turns: the durable unit of work. Queueing (the round-robin rotation, budgets,
inbox wake-ups), claiming, finishing and failing, and the repairs the sweeper makes.

A turn is claimed with a conditional update, so any number of racing workers run it
once; its finish is one transaction that logs the outcome and hands the floor on."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Exists, F, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from teams import services
from teams.integrations import webhooks
from teams.lib.catalog import Usage
from teams.lib.compiled import RotationValues, compiled, rotation_rows
from teams.live import events
from teams.live.event_payloads import TeamStatusOut, TurnOut
from teams.models import (
    ACTIVE_TURN_STATUSES,
    Agent,
    Message,
    PMRequest,
    Replay,
    Team,
    Turn,
    WebhookEvent,
)
from teams.run import budgets, drift, drift_alerts, locks, stuck
from teams.run.lifecycle import TeamAction
from teams.run.usage import turn_add_usage, turn_usage_fields

log = logging.getLogger("loom.turns")

# A running turn's lease (settings.LOOM_TURN_LEASE, 20 s by default) is renewed by its
# worker's heartbeat (turns_renew_leases) every quarter lease, so a slow model call
# keeps its turn while a dead worker's turn is re-queued within about a lease.
MAX_ATTEMPTS = 3
# How a turn that asked the PM is logged in the conversation (a system line, written
# by the agent: other agents read it as Loom's note, never as the agent's own words).
PM_INPUT = "(Requesting PM input: {question})"


# --- queueing ------------------------------------------------------------------


def rotation(team: Team) -> list[Agent]:
    """Speakers in order: every agent but the external ones, coach included. Each
    carries what enqueue_next asks of the team's unfinished turns, read in the same
    statement: `busy` (a turn of its own queued or running), `talking` (the team's
    conversation turn is queued or running) and `waiting` (the team's first turn
    stopped at a call for approval, or None). One statement written in SQL, read on
    every turn (teams.lib.compiled; speakers() is the ORM's reading it is held to)."""
    return rotation_rows(Agent, team_id=team.id, values=ROTATION_VALUES)


ROTATION_VALUES = RotationValues(
    active=tuple(ACTIVE_TURN_STATUSES),
    waiting=Turn.Status.WAITING,
    conversation=Turn.Purpose.CONVERSATION,
    external=Agent.Role.EXTERNAL,
)


def speakers(team: Team) -> QuerySet[Agent]:
    """rotation() as the ORM reads it (what tests/teams/lib/test_compiled.py compares)."""
    speaking = Agent.objects.filter(team_id=team.id).exclude(role=Agent.Role.EXTERNAL)
    return speaking.order_by("position", "id").annotate(**_unfinished_turns())


def _unfinished_turns() -> dict:
    """rotation's subqueries, on each agent row."""
    unfinished = Turn.objects.filter(team_id=OuterRef("team_id"))
    active = unfinished.filter(status__in=ACTIVE_TURN_STATUSES)
    return {
        "busy": Exists(active.filter(agent_id=OuterRef("pk"))),
        "talking": Exists(active.filter(purpose=Turn.Purpose.CONVERSATION)),
        "waiting": Subquery(
            unfinished.filter(status=Turn.Status.WAITING).order_by("id").values("id")[:1]
        ),
    }


def next_speaker(speakers: list[Agent], team: Team, after: Agent | None = None) -> Agent | None:
    """The agent after `after` (default: the last conversation speaker) in the
    rotation `speakers`."""
    if not speakers:
        return None
    if after is not None:
        last = after.id
    else:
        last = (
            Turn.objects.filter(team=team, purpose=Turn.Purpose.CONVERSATION)
            .exclude(status=Turn.Status.CANCELLED)
            .order_by("-id")
            .values_list("agent_id", flat=True)
            .first()
        )
    ids = [a.id for a in speakers]
    if last not in ids:
        return speakers[0]
    return speakers[(ids.index(last) + 1) % len(speakers)]


def turn_enqueue(*, team: Team, agent: Agent, number: int, purpose=Turn.Purpose.CONVERSATION):
    """Queue a turn and wake a worker for it once the transaction commits."""
    turn = Turn.objects.create(
        team=team,
        agent=agent,
        purpose=purpose,
        phase=team.phase,
        number=number,
        model=agent.effective_model,
    )
    events.wake_worker(turn.id)
    return turn


def enqueue_next(team: Team, after: Agent | None = None) -> Turn | None:
    """Queue the next speaker's turn if the (locked) team is running and has budget."""
    if team.status != Team.Status.RUNNING:
        return None
    budget = budgets.budget_reached(team)
    if budget:  # the team pauses with a budget request for the PM
        budgets.budget_stop(team=team, budget=budget)
        return None
    speakers = rotation(team)  # with the team's unfinished turns, in one read
    if speakers:
        waiting = speakers[0].waiting
    else:  # nobody speaks, but a turn may still wait for its approval
        waiting = (
            Turn.objects.filter(team=team, status=Turn.Status.WAITING)
            .order_by("id")
            .values_list("id", flat=True)
            .first()
        )
    if waiting is not None:  # a turn waiting for an approval goes first
        return _waiting_resume(team, Turn.objects.get(pk=waiting))
    # The PM's choice (teams.run.steering), if it is still in the rotation.
    picked = next((a for a in speakers if a.id == team.next_speaker_id), None)
    agent = picked or next_speaker(speakers, team, after)
    if agent is None:
        services.system_note(team, "The team has no agents to speak; add some and resume.")
        services.team_transition(team=team, action=TeamAction.HALT)
        return None
    if budgets.agent_budget_reached(agent):
        budgets.budget_stop(team=team, budget=budgets.BudgetKind.COST, agent=agent)
        return None
    # One conversation turn at a time, and the speaker may be busy with an inbox
    # turn (whose finish hands the floor on again).
    if agent.talking or agent.busy:
        return None
    # The choice is used up when that turn begins (turn_claim): a turn queued for the
    # chosen agent and cancelled by a pause before it began is queued again on resume.
    return turn_enqueue(team=team, agent=agent, number=team.turn_count + 1)


def _waiting_resume(team: Team, turn: Turn) -> Turn | None:
    """A turn stopped at a call for approval goes on once the PM has answered; while
    the request is open, the team waits for the PM (as after a resume from pause)."""
    open_request = PMRequest.objects.filter(
        turn=turn, kind=PMRequest.Kind.APPROVAL, status=PMRequest.Status.OPEN
    ).exists()
    if open_request:
        services.team_transition(team=team, action=TeamAction.AWAIT_PM)
        return None
    if Turn.objects.filter(pk=turn.pk, status=Turn.Status.WAITING).update(
        status=Turn.Status.QUEUED, queued_at=timezone.now()
    ):
        events.wake_worker(turn.pk)
    return turn


def inbox_wake(agent: Agent) -> Turn | None:
    """Give an agent a turn of its own for its inbox when its team is not talking.

    A team in a conversation (running, waiting for the PM) or paused by the PM
    reads inboxes in the rotation; external agents are driven by their program."""
    team = Team.objects.get(pk=agent.team_id)
    if team.status not in (Team.Status.IDLE, Team.Status.DONE):
        return None
    if agent.role == Agent.Role.EXTERNAL:
        return None
    if Turn.objects.filter(agent=agent, status__in=ACTIVE_TURN_STATUSES).exists():
        return None  # the running turn's finish looks at the inbox again
    if Turn.objects.filter(team=team).count() >= team.max_turns * 2:
        return None  # a safety net against agents pinging each other forever
    try:
        # A savepoint: a wake-up racing this one (a second question to the agent at
        # the same moment) may insert its turn first, and the agent's one active turn
        # (a unique constraint) reads both questions; this one then adds nothing.
        with transaction.atomic():
            return turn_enqueue(
                team=team, agent=agent, number=team.turn_count, purpose=Turn.Purpose.INBOX
            )
    except IntegrityError:
        if Turn.objects.filter(agent=agent, status__in=ACTIVE_TURN_STATUSES).exists():
            return None
        raise


def turns_withdraw(*, team: Team, queued: QuerySet[Turn] | None = None) -> int:
    """Withdraw queued turns of the (locked) team, never begun: all of them, or those
    of `queued` (the team's turns, narrowed by the caller). Each is cancelled and
    announced as turn_cancel announces one (the turn on the team's page, the team's
    progress); the number withdrawn."""
    queued = Turn.objects.filter(team=team) if queued is None else queued
    withdrawn = list(queued.filter(status=Turn.Status.QUEUED).select_related("agent"))
    if not withdrawn:
        return 0
    finished_at = timezone.now()
    taken = Turn.objects.filter(pk__in=[t.pk for t in withdrawn], status=Turn.Status.QUEUED)
    taken.update(status=Turn.Status.CANCELLED, finished_at=finished_at)
    status = TeamStatusOut.of(team)
    for turn in withdrawn:
        turn.status, turn.finished_at = Turn.Status.CANCELLED, finished_at
        events.publish(events.TurnFinished(turn=TurnOut.of(turn), team=status), team_id=team.id)
    events.publish(events.TeamProgress.of(team), team_id=team.id)
    return len(withdrawn)


def inbox_pending(agent: Agent, after_id: int) -> bool:
    """Has the agent been sent queries it has not had a turn to see yet?"""
    return Message.objects.filter(
        kind=Message.Kind.QUERY, recipient=agent, id__gt=after_id
    ).exists()


# --- running -------------------------------------------------------------------


def lease() -> timedelta:
    """How long a claimed turn is its worker's without a renewal."""
    return timedelta(seconds=settings.LOOM_TURN_LEASE)


def turns_renew_leases(*, worker: str, turn_ids) -> int:
    """The heartbeat: extend the leases of the turns this worker is running now (one
    UPDATE); the number renewed. Only turns a live thread runs are named, so a turn
    whose thread died in this process still expires and is re-queued."""
    ids = list(turn_ids)
    if not ids:
        return 0
    return Turn.objects.filter(pk__in=ids, status=Turn.Status.RUNNING, claimed_by=worker).update(
        lease_expires_at=timezone.now() + lease()
    )


def turn_claim(
    turn_id: int,
    worker: str,
    *,
    replay_runs_it: bool = False,
    annotate: Callable[[], dict] | None = None,
) -> Turn | None:
    """Take a queued turn. Exactly one of any number of racing workers gets it, and
    none while a replay runs its team (teams.engine.replay answers its model calls),
    unless `replay_runs_it` (the replay's own run). `annotate` gives the expressions
    read with the turn (teams.engine.prompts: what building its request needs)."""
    now = timezone.now()
    claim = compiled(Turn, _claim_expressions)
    # The replay check is in the claim's own statement: no read before it.
    queued = _queued(with_replay_check=not replay_runs_it).filter(pk=turn_id)
    claimed = queued.update(
        status=Turn.Status.RUNNING,
        claimed_by=worker,
        lease_expires_at=now + lease(),
        attempts=F("attempts") + 1,
        started_at=now,
        snapshot_message_id=claim["snapshot"],
    )
    if not claimed:
        return None
    turn = _claimed_read(annotate).get(pk=turn_id)
    chosen = turn.team.next_speaker_id == turn.agent_id
    if chosen and turn.purpose == Turn.Purpose.CONVERSATION:  # the PM's choice, used
        Team.objects.filter(pk=turn.team_id, next_speaker=turn.agent_id).update(next_speaker=None)
        turn.team.next_speaker = None
    if turn.attempts == 1:
        events.publish(
            events.TurnStarted(turn_id=turn.id, agent=turn.agent.name, number=turn.number),
            team_id=turn.team_id,
        )
    return turn


@functools.cache
def _queued(*, with_replay_check: bool) -> QuerySet[Turn]:
    queued = Turn.objects.filter(status=Turn.Status.QUEUED)
    replay_running = compiled(Turn, _claim_expressions)["replay_running"]
    return queued.exclude(replay_running) if with_replay_check else queued


@functools.cache
def _claimed_read(annotate: Callable[[], dict] | None) -> QuerySet[Turn]:
    claimed = Turn.objects.select_related("team", "agent")
    return claimed.annotate(**compiled(Turn, annotate)) if annotate else claimed


@functools.cache
def _claim_expressions() -> dict:
    """turn_claim's subqueries, on the turn's row."""
    newest = Message.objects.filter(team_id=OuterRef("team_id")).order_by("-id").values("id")[:1]
    replays = Replay.objects.filter(team_id=OuterRef("team_id"), status=Replay.Status.RUNNING)
    return {
        # The context snapshot is fixed at the first claim: a resumed turn sees what
        # the first attempt saw.
        "snapshot": Coalesce(
            F("snapshot_message_id"),
            Subquery(newest),
            Value(0),
            output_field=BigIntegerField(),
        ),
        "replay_running": Exists(replays),
    }


def _still_mine(turn: Turn, worker: str):
    return Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING, claimed_by=worker)


def _turn_finished_publish(turn: Turn, team: Team) -> None:
    """The team's page gets the turn and the team; the team list the team."""
    events.publish(
        events.TurnFinished(turn=TurnOut.of(turn), team=TeamStatusOut.of(team)), team_id=team.id
    )
    events.publish(events.TeamProgress.of(team), team_id=team.id)


def _turn_log(turn: Turn, text: str, outcome, reason: str):
    """Write the turn's outcome into the conversation; the outcome it had (no text and
    no tool's end is a pass)."""
    agent, team = turn.agent, turn.team
    if outcome == Turn.Outcome.PASS or (not text and outcome is None):
        services.message_add(
            team=team,
            content=f"({agent.name} passes: {reason if outcome else 'no response'})",
            kind=Message.Kind.PASS_NOTE,
            author=agent,
            turn=turn,
            phase=turn.phase,
        )
        outcome = Turn.Outcome.PASS
    else:
        outcome = outcome or Turn.Outcome.MESSAGE
        # A turn that closed its phase: its words were posted before the summary.
        if text and outcome != Turn.Outcome.PHASE_COMPLETE:
            services.message_add(team=team, content=text, author=agent, turn=turn, phase=turn.phase)
        if outcome == Turn.Outcome.PM_REQUEST:  # a record of the call, not the agent's words
            services.message_add(
                team=team,
                content=PM_INPUT.format(question=reason),
                kind=Message.Kind.SYSTEM,
                author=agent,
                turn=turn,
                phase=turn.phase,
            )
    return outcome


@dataclass(frozen=True)
class FinalCall:
    """The model call that ended a turn (its reply made no tool call): its step is
    written and its usage counted in the finish's transaction, not one of its own."""

    record: Callable[[], None]  # writes the call's TurnStep
    model: str
    usage: Usage


def turn_finish(
    *,
    turn: Turn,
    worker: str,
    text: str,
    outcome: Turn.Outcome | None = None,
    reason: str = "",
    final_call: FinalCall | None = None,
) -> bool:
    """Log the turn's outcome in the conversation and hand over the floor, at once.

    `outcome` is how a tool (pass, PM request, phase complete) or the step limit
    (message) ended the turn, None when the model simply stopped: then its text is
    the message, and no text at all is a pass. False when the lease was lost to
    another worker, which then logs the turn itself (the final call's tokens still
    count: it was made)."""
    finished = _turn_finish(
        turn=turn, worker=worker, text=text, outcome=outcome, reason=reason, final_call=final_call
    )
    if not finished and final_call is not None:
        turn_add_usage(turn=turn, model=final_call.model, usage=final_call.usage)
    return finished


@transaction.atomic
def _turn_finish(**finish) -> bool:
    with events.numbered_together():  # the message's and the turn's: one statement
        return _turn_finish_numbered(**finish)


def _turn_finish_numbered(*, turn, worker, text, outcome, reason, final_call) -> bool:
    agent, team = turn.agent, turn.team
    if final_call is not None:
        final_call.record()
    outcome = _turn_log(turn, text, outcome, reason)
    finished_at = timezone.now()
    agent.turns += 1  # as counted below, so the score includes this turn
    turn.drift_score = drift.score(agent)
    usage, cost = {}, 0
    if final_call is not None:
        usage, cost = turn_usage_fields(turn=turn, model=final_call.model, usage=final_call.usage)
    # The team's row first (count, spend, lock: teams.run.locks), then the turn's:
    # rolled back with the rest if the turn is no longer ours.
    counted = 1 if turn.purpose == Turn.Purpose.CONVERSATION else 0
    team = locks.team_lock(
        team, add={"turn_count": counted, "spent_usd": cost}, read=stuck.checks_read(team.phase)
    )
    owned = _still_mine(turn, worker).update(
        status=Turn.Status.DONE,
        outcome=outcome,
        finished_at=finished_at,
        lease_expires_at=None,
        drift_score=turn.drift_score,
        **usage,
    )
    if not owned:
        transaction.set_rollback(True)
        log.warning("Turn %s was taken over by another worker; dropping this result", turn.id)
        return False
    turn.status, turn.outcome, turn.finished_at = Turn.Status.DONE, outcome, finished_at
    Agent.objects.filter(pk=agent.pk).update(turns=F("turns") + 1, drift_score=turn.drift_score)
    _turn_finished_publish(turn, team)
    budgets.budget_check(team)  # 80% of a budget used: the PM is told, once
    budgets.agent_budget_check(team, agent)  # and of the agent's own (no query without one)
    drift_alerts.drift_alert_check(turn)  # significant drift two turns running: told once
    stuck.stuck_check(team=team, turn=turn)  # the team asks the PM for help
    # After an inbox turn the conversation may have been waiting for this agent.
    enqueue_next(team, after=agent if turn.purpose == Turn.Purpose.CONVERSATION else None)
    if turn.purpose == Turn.Purpose.INBOX and inbox_pending(agent, turn.snapshot_message_id or 0):
        inbox_wake(agent)  # queries that arrived during this turn
    return True


@transaction.atomic
def turn_wait(*, turn: Turn, worker: str) -> bool:
    """Stop a turn at a tool call that waits for the PM's approval: no worker holds
    it; the answer queues it again and it resumes at that call. An answer given
    between the request's opening and this stop found the turn still running and
    could not queue it: the team runs again, so it is queued here."""
    team = locks.team_lock(turn.team)  # an answer given meanwhile is seen below
    owned = _still_mine(turn, worker).update(status=Turn.Status.WAITING, lease_expires_at=None)
    if owned:
        turn.refresh_from_db()
        _turn_finished_publish(turn, team)
        if team.status == Team.Status.RUNNING:  # answered already
            enqueue_next(team)
    return bool(owned)


@transaction.atomic
def turn_cancel(*, turn: Turn, worker: str) -> bool:
    """End a turn that made no model call (its call would have crossed a budget):
    it does not count, and the same agent speaks first when the team resumes."""
    team = locks.team_lock(turn.team_id)  # the team's row before the turn's
    owned = _still_mine(turn, worker).update(
        status=Turn.Status.CANCELLED, finished_at=timezone.now(), lease_expires_at=None
    )
    if owned:
        turn.refresh_from_db()
        _turn_finished_publish(turn, team)
    return bool(owned)


@transaction.atomic
def turn_fail(*, turn: Turn, worker: str, error: str) -> None:
    """Record the error, tell the team, and pause it so the PM can look before retrying."""
    team = locks.team_lock(turn.team_id)  # the team's row before the turn's
    owned = _still_mine(turn, worker).update(
        status=Turn.Status.FAILED,
        outcome=Turn.Outcome.ERROR,
        error=error,
        finished_at=timezone.now(),
        lease_expires_at=None,
    )
    if not owned:
        return
    services.system_note(
        team,
        f"The turn of {turn.agent.name} failed: {error}. The team is paused; resume to retry.",
        turn=turn,
    )
    if services.team_transition(team=team, action=TeamAction.HALT):
        webhooks.webhooks_notify(
            team=team,
            event=WebhookEvent.TEAM_FAILED,
            payload={
                "error": error,
                "agent": turn.agent.name,
                "turn_id": turn.id,
                "turn_number": turn.number,
                "status": team.status,
            },
        )
    budgets.budget_check(team)  # the failed turn's cost counts too
    budgets.agent_budget_check(team, turn.agent)
    turn.refresh_from_db()
    _turn_finished_publish(turn, team)


# --- repairs (the sweeper) -----------------------------------------------------


def turns_requeue_abandoned(now=None) -> tuple[int, int]:
    """Turns whose worker died (lease expired) go back to the queue, or fail after
    MAX_ATTEMPTS; (re-queued, failed)."""
    now = now or timezone.now()
    requeued = failed = 0
    for turn in Turn.objects.filter(status=Turn.Status.RUNNING, lease_expires_at__lt=now):
        if turn.attempts >= MAX_ATTEMPTS:
            turn_fail(
                turn=turn, worker=turn.claimed_by, error=f"Gave up after {turn.attempts} attempts."
            )
            failed += 1
            continue
        taken = _still_mine(turn, turn.claimed_by).update(
            status=Turn.Status.QUEUED, claimed_by="", lease_expires_at=None
        )
        if taken:
            log.warning("Turn %s lost its worker %s; re-queued", turn.pk, turn.claimed_by)
            events.wake_worker(turn.pk)
            requeued += 1
    return requeued, failed


def turns_rewake_stale(now=None) -> int:
    """Queued turns whose wake-up was lost get another."""
    now = now or timezone.now()
    # Half a lease (10 s by default): a duplicate wake-up is harmless, the claim decides.
    stale_queued = lease() / 2
    stale = Turn.objects.filter(status=Turn.Status.QUEUED, queued_at__lt=now - stale_queued)
    ids = list(stale.values_list("pk", flat=True))
    for turn_id in ids:
        events.wake_worker(turn_id)
    return len(ids)


def teams_restart_stalled() -> int:
    """Running teams with no conversation turn queued or running get their next one.

    Nothing should leave a team so, but the sweeper checks: a team must never wait
    for a turn nobody will run."""
    active = Turn.objects.filter(
        team=OuterRef("pk"), purpose=Turn.Purpose.CONVERSATION, status__in=ACTIVE_TURN_STATUSES
    )
    restarted = 0
    for team in Team.objects.filter(status=Team.Status.RUNNING).exclude(Exists(active)):
        with transaction.atomic():
            if enqueue_next(locks.team_lock(team)) is not None:
                restarted += 1
    return restarted
