"""Running turns in a process: the worker identity, the claimed-turn runner, the
heartbeat that renews the leases of the turns running here, the channel worker that
outlives a channel-layer outage, and the sweeper that repairs what crashed workers
and lost wake-ups leave behind."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from channels.consumer import AsyncConsumer
from channels.consumer import get_handler_name as channels_handler_name
from channels.worker import Worker
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from teams.conversation import questions
from teams.engine import evals, loop
from teams.live import events
from teams.observability import health, telemetry
from teams.run import turns

log = logging.getLogger("loom.worker")

HOST = socket.gethostname()
WORKER_ID = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
MAX_SWEEP_SECONDS = 5.0

# The turns this process runs now, by id -> the worker name that claimed them.
_running: dict[int, str] = {}
_running_lock = threading.Lock()


def sweep_seconds() -> float:
    """Sweep every quarter lease (at most every 5 s): a dead worker's turn is re-queued
    at most a lease and a quarter after its last renewal."""
    return max(0.2, min(MAX_SWEEP_SECONDS, settings.LOOM_TURN_LEASE / 4))


def heartbeat_seconds() -> float:
    """Renew every quarter lease: three beats may fail before a running turn is lost."""
    return max(0.2, settings.LOOM_TURN_LEASE / 4)


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def turn_executor() -> ThreadPoolExecutor:
    """The threads this process runs turns in (LOOM_WORKER_THREADS of them)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=settings.LOOM_WORKER_THREADS, thread_name_prefix="loom-turn"
            )
        return _executor


def run_claimed_turn(turn_id: int, worker: str = WORKER_ID):
    """Thread entry point: run one turn with this thread's own database connection.

    The connection outlives the turn (CONN_MAX_AGE): the thread's next turn reuses it
    after a health check, and one that failed or grew too old is closed at the turn's
    end and opened afresh for the next. It stays open while the model is asked (see
    docs/production.md).

    While it runs the heartbeat renews its lease; a turn whose run dies here (its
    database connection killed, say) is no longer renewed, so the sweeper re-queues
    it once the lease runs out and the next attempt resumes from its steps."""
    close_old_connections()  # and a health check before the connection's first use
    try:
        return run_tracked_turn(turn_id, worker)
    finally:
        close_old_connections()  # closes it only when broken or past CONN_MAX_AGE


def run_tracked_turn(turn_id: int, worker: str = WORKER_ID):
    """Run one turn in this thread as it is, its lease renewed by the heartbeat while
    it runs (an eval's driver runs turns so, on its own connection)."""
    with _running_lock:
        # A duplicate wake-up of a turn a thread here runs already: that thread keeps
        # it (and its lease, which the heartbeat renews); this one has nothing to do.
        duplicate = turn_id in _running
        if not duplicate:
            _running[turn_id] = worker  # before the claim: renewed from its first moment
    if duplicate:
        telemetry.wake_done(turn_id)
        return None
    try:
        return loop.run_turn(turn_id, worker)
    except Exception:
        log.exception("Turn %s stopped; the sweeper re-queues it when its lease ends", turn_id)
        return None
    finally:
        with _running_lock:
            _running.pop(turn_id, None)
        telemetry.wake_done(turn_id)  # its claim used the wake-up's trace context, or failed


def running_turns() -> dict[str, list[int]]:
    with _running_lock:
        by_worker: dict[str, list[int]] = {}
        for turn_id, worker in _running.items():
            by_worker.setdefault(worker, []).append(turn_id)
        return by_worker


class Heartbeat(threading.Thread):
    """Every quarter lease: renew the leases of the turns running in this process
    (one UPDATE) and record that this worker is alive (for /healthz)."""

    def __init__(self, worker: str = WORKER_ID):
        super().__init__(name="loom-heartbeat", daemon=True)
        self.worker = worker
        self.started_at = timezone.now()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            close_old_connections()  # a broken connection is replaced before the beat
            try:
                self.beat()
            finally:
                close_old_connections()
            self.stopped.wait(heartbeat_seconds())

    def beat(self) -> int:
        """One beat; the number of leases renewed."""
        renewed = 0
        try:
            running = running_turns()
            for worker, ids in running.items():
                renewed += turns.turns_renew_leases(worker=worker, turn_ids=ids)
            health.worker_heartbeat_record(
                worker=self.worker,
                host=HOST,
                pid=os.getpid(),
                started_at=self.started_at,
                running_turns=sum(len(ids) for ids in running.values()),
            )
        except Exception as exc:  # the database is away: try again on the next beat
            log.warning("Heartbeat of %s failed: %s", self.worker, exc)
        return renewed


_heartbeat: Heartbeat | None = None
_heartbeat_lock = threading.Lock()


def start_heartbeat() -> Heartbeat:
    """The process's heartbeat thread, started once."""
    global _heartbeat
    with _heartbeat_lock:
        if _heartbeat is None or not _heartbeat.is_alive():
            _heartbeat = Heartbeat()
            _heartbeat.start()
        return _heartbeat


class TurnWorker(Worker):
    """channels' Worker for `loom.turns` that beats while it runs and keeps listening
    through a channel-layer outage (Redis restarted): it retries the receive with a
    backoff instead of exiting. Wake-ups lost meanwhile are repeated by the sweeper."""

    async def handle(self):
        start_heartbeat()
        # Events the turns publish go out through this loop and its connections.
        events.send_through(asyncio.get_running_loop())
        try:
            await super().handle()
        finally:
            events.send_through(None)

    async def listener(self, channel):
        failures = 0
        while True:
            try:
                message = await self.channel_layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                wait = min(0.5 * 2 ** min(failures - 1, 4), 5.0)
                log.warning("Receiving on %s failed (%s); retrying in %.1f s", channel, exc, wait)
                await asyncio.sleep(wait)
                continue
            if failures:
                log.info("Receiving on %s again", channel)
                failures = 0
            if not message.get("type"):
                log.warning("Dropped a message without a type on %s", channel)
                continue
            scope = {"type": "channel", "channel": channel}
            await self.get_or_create_application_instance(channel, scope).put(message)


def start_send_loop() -> asyncio.AbstractEventLoop:
    """For a process without an event loop of its own (`manage.py sweep`): a thread
    running one, which this process's events are sent through (teams.live.events)."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="loom-send", daemon=True).start()
    events.send_through(loop)
    return loop


def sweep(now=None) -> dict:
    """Re-queue turns whose worker died (lease expired), re-wake queued turns whose
    wake-up was lost, expire queries, restart stalled teams, step the eval runs
    started through the API. Safe to run anywhere, any number of times."""
    now = now or timezone.now()
    requeued, failed = turns.turns_requeue_abandoned(now)
    health.workers_forget_stale(now)
    return {
        "requeued": requeued,
        "failed": failed,
        "rewoken": turns.turns_rewake_stale(now),
        "expired": questions.expire(now),
        "restarted": turns.teams_restart_stalled(),
        "eval_cases_scored": evals.advance_all(),
    }


def sweep_in_thread() -> dict:
    close_old_connections()
    try:
        return sweep()
    finally:
        close_old_connections()


async def run_sweeper(interval: float | None = None) -> None:
    while True:
        try:
            counts = await sync_to_async(sweep_in_thread, thread_sensitive=False)()
            if any(counts.values()):
                log.info("Sweeper: %s", counts)
        except Exception:
            log.exception("Sweeper pass failed")
        await asyncio.sleep(interval or sweep_seconds())


class TurnWorkerConsumer(AsyncConsumer):
    """Listens on `loom.turns`; each wake-up names a turn to claim and run.

    Turns run in their own threads so one slow model call does not hold up the
    others; the claim makes a duplicate wake-up harmless."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots = asyncio.Semaphore(settings.LOOM_WORKER_THREADS)
        self.tasks: set[asyncio.Task] = set()

    async def dispatch(self, message):
        # channels' dispatch closes old connections in a thread hop per message; this
        # handler touches no database (the turn's thread looks after its connection).
        handler = getattr(self, channels_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def turn_queued(self, message):
        telemetry.wake_received(message)  # the trace context it was queued in
        task = asyncio.ensure_future(self._run(message["turn_id"]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, turn_id: int):
        # Its own pool: asyncio's default one has CPU count + 4 threads (6 on two
        # cores), which bounded 16 teams to a third of what the model allowed.
        async with self.slots:
            await asyncio.get_running_loop().run_in_executor(
                turn_executor(), run_claimed_turn, turn_id
            )
