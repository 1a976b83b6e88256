"""Running turns in a process: the worker identity, the claimed-turn runner and the
sweeper that repairs what crashed workers and lost wake-ups leave behind."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections
from django.utils import timezone

from teams import questions, turns
from teams.engine import loop

log = logging.getLogger("loom.worker")

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
SWEEP_SECONDS = 5


def run_claimed_turn(turn_id: int, worker: str = WORKER_ID):
    """Thread entry point: run one turn with this thread's own database connection."""
    close_old_connections()
    try:
        return loop.run_turn(turn_id, worker)
    finally:
        connections.close_all()


def sweep(now=None) -> dict:
    """Re-queue turns whose worker died (lease expired), re-wake queued turns whose
    wake-up was lost, expire queries, restart stalled teams. Safe to run anywhere,
    any number of times."""
    now = now or timezone.now()
    requeued, failed = turns.turns_requeue_abandoned(now)
    return {
        "requeued": requeued,
        "failed": failed,
        "rewoken": turns.turns_rewake_stale(now),
        "expired": questions.expire(now),
        "restarted": turns.teams_restart_stalled(),
    }


def sweep_in_thread() -> dict:
    close_old_connections()
    try:
        return sweep()
    finally:
        connections.close_all()


async def run_sweeper(interval: float = SWEEP_SECONDS) -> None:
    while True:
        try:
            counts = await sync_to_async(sweep_in_thread, thread_sensitive=False)()
            if any(counts.values()):
                log.info("Sweeper: %s", counts)
        except Exception:
            log.exception("Sweeper pass failed")
        await asyncio.sleep(interval)
