"""Running turns in a process: the worker identity, the claimed-turn runner and the
sweeper that repairs what crashed workers and lost wake-ups leave behind."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from datetime import timedelta

from django.db import close_old_connections, connections
from django.utils import timezone

from teams import agent_loop, conversation, events, questions
from teams.models import Turn

log = logging.getLogger("loom.worker")

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
MAX_ATTEMPTS = 3
STALE_QUEUED = timedelta(seconds=10)
SWEEP_SECONDS = 5


def run_claimed_turn(turn_id: int, worker: str = WORKER_ID):
    """Thread entry point: run one turn with this thread's own database connection."""
    close_old_connections()
    try:
        return agent_loop.run_turn(turn_id, worker)
    finally:
        connections.close_all()


def sweep(now=None) -> dict:
    """Re-queue turns whose worker died (lease expired), re-wake queued turns whose
    wake-up was lost. Safe to run anywhere, any number of times."""
    now = now or timezone.now()
    requeued = failed = rewoken = 0
    for turn in Turn.objects.filter(status=Turn.Status.RUNNING, lease_expires_at__lt=now):
        if turn.attempts >= MAX_ATTEMPTS:
            agent_loop.fail(turn, turn.claimed_by, f"Gave up after {turn.attempts} attempts.")
            failed += 1
            continue
        taken = Turn.objects.filter(
            pk=turn.pk, status=Turn.Status.RUNNING, claimed_by=turn.claimed_by
        ).update(status=Turn.Status.QUEUED, claimed_by="", lease_expires_at=None)
        if taken:
            log.warning("Turn %s lost its worker %s; re-queued", turn.pk, turn.claimed_by)
            events.wake_worker(turn.pk)
            requeued += 1
    stale = Turn.objects.filter(status=Turn.Status.QUEUED, queued_at__lt=now - STALE_QUEUED)
    for turn_id in stale.values_list("pk", flat=True):
        events.wake_worker(turn_id)
        rewoken += 1
    expired = questions.expire(now)
    restarted = conversation.teams_restart_stalled()
    return {
        "requeued": requeued,
        "failed": failed,
        "rewoken": rewoken,
        "expired": expired,
        "restarted": restarted,
    }


def sweep_in_thread() -> dict:
    close_old_connections()
    try:
        return sweep()
    finally:
        connections.close_all()


async def run_sweeper(interval: float = SWEEP_SECONDS) -> None:
    from asgiref.sync import sync_to_async

    while True:
        try:
            counts = await sync_to_async(sweep_in_thread, thread_sensitive=False)()
            if any(counts.values()):
                log.info("Sweeper: %s", counts)
        except Exception:
            log.exception("Sweeper pass failed")
        await asyncio.sleep(interval)
