"""Driving an eval run to its end from one process (`manage.py eval run`): step it
(answer the PM's requests, start queued cases, score stopped ones) and, unless the
normal workers elsewhere run the turns (`external`), run its teams' queued turns here
with the worker's own turn runner, `concurrency` at a time (in a pool with the
worker's heartbeat; one at a time in this thread)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from teams.engine import evals, worker
from teams.models import EvalRun, Turn

POLL_SECONDS = 0.2
SWEEP_SECONDS = 5.0


def _queued_turns(run: EvalRun) -> list[int]:
    return list(
        Turn.objects.filter(team__eval_case__run=run, status=Turn.Status.QUEUED)
        .order_by("id")
        .values_list("id", flat=True)
    )


def drive(
    run: EvalRun,
    *,
    inline: bool = True,
    on_progress: Callable[[EvalRun], None] | None = None,
) -> EvalRun:
    """Run `run` until every case is scored; the run as it ended."""
    concurrency = run.settings.get("concurrency", 1)
    pool = ThreadPoolExecutor(concurrency, "loom-eval") if inline and concurrency > 1 else None
    running: dict[int, Future] = {}
    if pool is not None:
        # Renews the leases of the pool's turns; a turn run in this thread renews its
        # own at each model call (the loop's).
        worker.start_heartbeat()
    last_sweep = time.monotonic()
    try:
        while True:
            evals.eval_run_step(run)
            run.refresh_from_db()
            if on_progress is not None:
                on_progress(run)
            if run.status == EvalRun.Status.DONE:
                return run
            ran = _run_turns(run, pool, running) if inline else False
            if inline and time.monotonic() - last_sweep > SWEEP_SECONDS:
                worker.sweep()  # what a worker's sweeper would repair meanwhile
                last_sweep = time.monotonic()
            if not ran:
                time.sleep(POLL_SECONDS)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


def _run_turns(run: EvalRun, pool: ThreadPoolExecutor | None, running: dict) -> bool:
    """Run queued turns: one here in this thread without a pool, else hand each to the
    pool. True when one ran (the loop goes on at once)."""
    for turn_id, future in list(running.items()):
        if future.done():
            running.pop(turn_id)
    queued = [t for t in _queued_turns(run) if t not in running]
    if pool is None:
        if queued:
            worker.run_tracked_turn(queued[0])
        return bool(queued)
    for turn_id in queued:
        running[turn_id] = pool.submit(worker.run_claimed_turn, turn_id)
    return False
