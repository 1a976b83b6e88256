"""The scaled-out mode for real: PostgreSQL, Redis and two `runworker` processes.

Runs when the suite runs on PostgreSQL and LOOM_TEST_REDIS_URL names a Redis
server (`make test` sets both when the servers answer)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from loomsite.env import parse_redis_url
from teams import services
from teams.models import Message, Team, Turn
from teams.run import team_actions
from tests.helpers import worker_redis_url

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = worker_redis_url()

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not REDIS_URL or connection.vendor != "postgresql",
        reason="needs PostgreSQL (LOOM_DATABASE_URL) and Redis (LOOM_TEST_REDIS_URL)",
    ),
]


def database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def test_two_runworker_processes_share_a_team_through_redis(settings):
    settings.CHANNEL_LAYERS = {"default": parse_redis_url(REDIS_URL, "LOOM_TEST_REDIS_URL")}
    env = {
        **os.environ,
        "LOOM_DATABASE_URL": database_url(),
        "LOOM_REDIS_URL": REDIS_URL,
        "LOOM_OFFLINE_DELAY": "0.02",
    }
    env.pop("ANTHROPIC_API_KEY", None)
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "runworker", "loom.turns"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        time.sleep(2)  # let both subscribe
        team = services.team_create(
            slug="scaled",
            goal="Prove the scaled-out mode.",
            agents=[{"name": n, "role": n} for n in ("coach", "researcher", "coder", "reviewer")],
        )
        team_actions.team_start(team=team)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            team.refresh_from_db()
            # ask_pm commits the request before the coach's turn is marked done.
            active = Turn.objects.filter(team=team, status__in=["queued", "running"])
            if team.status == Team.Status.AWAITING_PM and not active.exists():
                break
            time.sleep(0.2)
    finally:
        for worker in workers:
            worker.terminate()
        logs = [worker.communicate(timeout=10)[0] for worker in workers]
    turns = list(Turn.objects.filter(team=team).order_by("id"))
    assert team.status == Team.Status.AWAITING_PM, (
        team.status,
        [(t.number, t.status, t.claimed_by, t.error) for t in turns],
        logs,
    )
    # The offline coach asks the PM on its third line (turn 9 of a team of four).
    assert len(turns) >= 5 and all(t.status == "done" for t in turns)
    assert turns[-1].agent.name == "coach" and turns[-1].outcome == "pm_request"
    assert all(t.attempts == 1 for t in turns), "a turn was claimed twice"
    # One line of the conversation per turn (the agents' own action records aside).
    said = Message.objects.filter(team=team, turn__isnull=False, recipient__isnull=True)
    assert said.count() == len(turns)
    assert len({t.claimed_by for t in turns}) >= 1
    for log in logs:
        assert "Traceback" not in log, log
