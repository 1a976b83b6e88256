"""Is Loom healthy? The workers' heartbeats (written here) and the reads behind
/healthz: the database, a round trip on the channel layer, the live workers, the
queue's depth and the age of its oldest turn.

The report names no team and no secret: counts, ages and worker ids (host:pid:nonce)."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.db.models import Min
from django.utils import timezone

from teams.files import sandbox
from teams.models import Turn, WorkerHeartbeat

log = logging.getLogger("loom.health")

CHANNEL_ROUND_TRIP_SECONDS = 2.0
# Heartbeat rows of workers gone this long are deleted by the sweeper.
FORGET_WORKERS_AFTER = timedelta(hours=1)


# --- the workers' side ----------------------------------------------------------


def worker_heartbeat_record(
    *, worker: str, host: str, pid: int, started_at: datetime, running_turns: int
) -> None:
    """One beat: the worker is alive now and runs this many turns."""
    WorkerHeartbeat.objects.update_or_create(
        worker=worker,
        defaults={
            "host": host[:255],
            "pid": pid,
            "started_at": started_at,
            "last_seen": timezone.now(),
            "running_turns": running_turns,
        },
    )


def workers_forget_stale(now=None) -> int:
    now = now or timezone.now()
    deleted, _ = WorkerHeartbeat.objects.filter(last_seen__lt=now - FORGET_WORKERS_AFTER).delete()
    return deleted


# --- the report ------------------------------------------------------------------


def live_window() -> timedelta:
    """A worker is live when it beat within two leases."""
    return timedelta(seconds=2 * settings.LOOM_TURN_LEASE)


def live_workers(now=None) -> list[WorkerHeartbeat]:
    now = now or timezone.now()
    return list(WorkerHeartbeat.objects.filter(last_seen__gte=now - live_window()))


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        log.warning("Health check: the database does not answer", exc_info=True)
        return False


async def _round_trip(layer) -> bool:
    # A channel of the layer's own making: the pub/sub layer (RedisPubSubChannelLayer)
    # delivers only to a reader already subscribed, and new_channel subscribes it.
    channel = await layer.new_channel("loom.health.")
    await layer.send(channel, {"type": "health.ping"})
    message = await layer.receive(channel)
    return message.get("type") == "health.ping"


def _channel_layer_ok() -> bool:
    layer = get_channel_layer()
    if layer is None:
        return False

    async def check():
        return await asyncio.wait_for(_round_trip(layer), CHANNEL_ROUND_TRIP_SECONDS)

    try:
        return async_to_sync(check)()
    except Exception:
        log.warning("Health check: no round trip on the channel layer", exc_info=True)
        return False


def health_report(now=None) -> dict:
    """The /healthz body; `healthy` says whether it is 200 or 503, `problems` why not."""
    now = now or timezone.now()
    problems: list[str] = []
    database = _database_ok()
    channel_layer = _channel_layer_ok()
    if not database:
        problems.append("The database does not answer.")
    if not channel_layer:
        problems.append("The channel layer failed a round trip.")
    workers: list[WorkerHeartbeat] = []
    depth = running = 0
    oldest_age = None
    if database:
        workers = live_workers(now)
        queued = Turn.objects.filter(status=Turn.Status.QUEUED)
        depth = queued.count()
        running = Turn.objects.filter(status=Turn.Status.RUNNING).count()
        oldest = queued.aggregate(oldest=Min("queued_at"))["oldest"]
        if oldest is not None:
            oldest_age = round(max(0.0, (now - oldest).total_seconds()), 1)
        if depth and not workers:
            problems.append("Turns are queued and no worker is live.")
        limit = settings.LOOM_HEALTH_MAX_QUEUE_AGE
        if oldest_age is not None and oldest_age > limit:
            problems.append(f"The oldest queued turn has waited over {limit:g} s.")
    return {
        "healthy": not problems,
        "status": "ok" if not problems else "unhealthy",
        "problems": problems,
        "database": "ok" if database else "error",
        "channel_layer": "ok" if channel_layer else "error",
        "workers": {
            "live": len(workers),
            "ids": sorted(w.worker for w in workers),
            "running_turns": sum(w.running_turns for w in workers),
        },
        "turns": {
            "queued": depth,
            "running": running,
            "oldest_queued_age_seconds": oldest_age,
        },
        "lease_seconds": settings.LOOM_TURN_LEASE,
        # Not a problem: the site serves without it, but agents cannot run commands.
        "commands": _sandbox_state(),
    }


def _sandbox_state() -> dict:
    """Whether run_command is offered here, and why not (teams.files.sandbox)."""
    reason = sandbox.sandbox_unavailable()
    return {"offered": not reason, "reason": reason or None}
