"""Faults while a team talks, and what the PM sees after: nothing lost, nothing said
twice, no tool run twice, every turn finished or failed visibly, and the team going
on by itself within 30 seconds.

The process faults run the scaled-out layout (scripts/scaled_out.py: daphne, two
`runworker loom.turns`, a sweeper) on the real PostgreSQL and a Redis server of the
test's own, with a short lease (LOOM_TURN_LEASE=3), agents on a Claude model served
by the fake Messages API: a worker killed during a model call and between a tool step
and the turn's end, Redis stopped and restarted, the worker's database connections
terminated. They run when the suite runs on PostgreSQL with LOOM_TEST_REDIS_URL set
and redis-server is installed. The model server's failures (429, 529, 500, a hang past
the timeout, a reset connection) run in-process on any database."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from loomsite.env import parse_redis_url
from teams.conversation import pm_requests
from teams.models import Message, PMRequest, Team, Turn, TurnStep
from teams.run import team_actions
from tests.fakes.messages_api import (
    Failure,
    FakeMessagesAPI,
    Reply,
    Reset,
    overloaded,
    rate_limited,
    text,
    tool,
)
from tests.helpers import drain, make_team
from tests.live_site import OUTPUT, database_url, free_port

ROOT = Path(__file__).resolve().parents[2]
MODEL = "claude-sonnet-4-6"
# Seconds, in the child processes: heartbeat and sweep every quarter lease (0.75 s).
# LOOM_TEST_FAULT_LEASE=20 measures the default lease's recovery.
LEASE = float(os.environ.get("LOOM_TEST_FAULT_LEASE", "3"))
TURNS = 6  # the team's turn budget: it stops by itself after these
RECOVERY_SECONDS = 30

spec = importlib.util.spec_from_file_location("scaled_out", ROOT / "scripts" / "scaled_out.py")
scaled_out = sys.modules.setdefault("scaled_out", importlib.util.module_from_spec(spec))
spec.loader.exec_module(scaled_out)

needs_services = pytest.mark.skipif(
    not os.environ.get("LOOM_TEST_REDIS_URL")
    or connection.vendor != "postgresql"
    or not shutil.which("redis-server"),
    reason="needs PostgreSQL (LOOM_DATABASE_URL), LOOM_TEST_REDIS_URL and redis-server",
)


# --- the model: each turn one tool call (a peer message), then its text ------------


class Model:
    """The fake Messages API's script. `hold(kind, seconds)` delays the next call of
    that kind ("first": a turn's first call; "after_tool": the call after its tool
    result); `held` is set when the delayed call arrives."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.holding: tuple[str, float] | None = None
        self.held = threading.Event()

    def hold(self, kind: str, seconds: float) -> None:
        self.held.clear()
        self.holding = (kind, seconds)

    def __call__(self, request):
        last = request.body["messages"][-1]
        after_tool = last["role"] == "user" and any(
            isinstance(b, dict) and b.get("type") == "tool_result"
            for b in (last["content"] if isinstance(last["content"], list) else [])
        )
        kind = "after_tool" if after_tool else "first"
        delay = 0.0
        with self.lock:
            self.calls += 1
            n = self.calls
            if self.holding and self.holding[0] == kind:
                delay, self.holding = self.holding[1], None
                self.held.set()
        if after_tool:
            reply = text(f"{request.agent} is done with call {n}.")
        else:
            peer = "reviewer" if request.agent == "coder" else "coder"
            reply = tool("peer_message", {"to": peer, "content": f"note {n}"}, f"toolu_{n:04d}")
        reply.delay = delay
        return reply


def fault_team(slug: str) -> Team:
    return make_team(
        slug,
        name="",
        goal="Survive faults.",
        max_turns=TURNS,
        agents=[
            {"name": "coder", "role": "coder", "model": MODEL},
            {"name": "reviewer", "role": "reviewer", "model": MODEL},
        ],
    )


def wait_for(condition, timeout: float, what: str, layout=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{layout.logs() if layout else ''}")


def settled(team: Team) -> bool:
    team.refresh_from_db()
    active = Turn.objects.filter(team=team, status__in=["queued", "running"]).exists()
    return team.status != Team.Status.RUNNING and not active


def assert_nothing_lost(team: Team, *, turns: int = TURNS) -> list[Turn]:
    """Every turn done once, its message said once, its tool run once."""
    all_turns = list(Turn.objects.filter(team=team).order_by("number", "id"))
    states = [(t.number, t.status, t.attempts, t.error) for t in all_turns]
    assert [t.number for t in all_turns] == list(range(1, turns + 1)), states
    assert all(t.status == Turn.Status.DONE for t in all_turns), states
    for turn in all_turns:
        said = Message.objects.filter(turn=turn, author=turn.agent, recipient__isnull=True)
        assert said.count() == 1, (turn.number, list(said.values_list("content", flat=True)))
        notes = Message.objects.filter(turn=turn, kind="peer")
        tool_steps = TurnStep.objects.filter(turn=turn, kind=TurnStep.Kind.TOOL)
        assert notes.count() == 1 and tool_steps.count() == 1, (turn.number, notes.count())
    peer = Message.objects.filter(team=team, kind="peer")
    contents = list(peer.values_list("content", flat=True))
    assert len(contents) == len(set(contents)) == turns, contents
    return all_turns


# --- the scaled-out layout on its own Redis ----------------------------------------


class RedisServer:
    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self.answers, 10, "redis-server")

    def answers(self) -> bool:
        return (
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "services_up.py"), "redis", self.url]
            ).returncode
            == 0
        )

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def api():
    model = Model()
    with FakeMessagesAPI(model) as server:
        server.model = model
        yield server


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def layout(django_db_setup, django_db_blocker, api, redis_server):
    with django_db_blocker.unblock():
        url = database_url()
    site = scaled_out.Layout(
        url,
        redis_server.url,
        web=1,
        workers=2,
        migrate=False,
        env={
            "ANTHROPIC_API_KEY": "sk-test-key",
            "ANTHROPIC_BASE_URL": api.url,
            "LOOM_TURN_LEASE": f"{LEASE:g}",
            "LOOM_MODEL_TIMEOUT": "20",
        },
        log_dir=OUTPUT / "faults",
    )
    site.start(timeout=90)
    yield site
    site.stop()
    # The processes wrote until they stopped (heartbeats, after the last test's flush):
    # the next module on this database must not find workers that seem live.
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def site(layout, transactional_db, settings, redis_server):
    """The layout, healthy with both workers live, and this process on its Redis."""
    settings.CHANNEL_LAYERS = {"default": parse_redis_url(redis_server.url, "test Redis")}
    for process in layout.processes:  # a worker killed by the last test comes back
        if not process.alive:
            process.start()
    layout.wait_healthy(60)
    return layout


def worker_of(layout, turn: Turn):
    pid = int(turn.claimed_by.split(":")[1])
    return next(p for p in layout.processes if p.popen.pid == pid)


def running_turn(team: Team) -> Turn:
    return wait_for(
        lambda: Turn.objects.filter(team=team, status="running").first(), 10, "a running turn"
    )


def kill_mid_turn(site, api, slug: str, hold: str) -> None:
    team = fault_team(slug)
    team_actions.team_start(team=team)
    wait_for(lambda: Turn.objects.filter(team=team, status="done").count() >= 2, 30, "2 turns")
    api.model.hold(hold, 30)  # the next such call hangs until its worker is killed
    assert api.model.held.wait(20), site.logs()
    turn = running_turn(team)
    if hold == "after_tool":  # the tool ran and its step is written
        assert TurnStep.objects.filter(turn=turn, kind="tool").count() == 1
    victim = worker_of(site, turn)
    killed_at = timezone.now()
    site.kill(victim.name)
    restarted = wait_for(
        lambda: Turn.objects.filter(pk=turn.pk, attempts=2).exclude(status="queued").first(),
        RECOVERY_SECONDS,
        "the turn's restart",
        site,
    )
    restart_seconds = (restarted.started_at - killed_at).total_seconds()
    wait_for(lambda: settled(team), RECOVERY_SECONDS, "the team to finish its turns", site)
    turns = assert_nothing_lost(team)
    assert turns[turn.number - 1].attempts == 2
    assert all(t.attempts == 1 for t in turns if t.pk != turn.pk)
    print(f"\nSIGKILL ({hold}) to restart: {restart_seconds:.1f} s (lease {LEASE:g} s)")
    # At most a lease after the last renewal, plus a sweep, plus the claim.
    assert restart_seconds < LEASE + min(5, LEASE / 4) + 2


@needs_services
def test_a_worker_killed_during_a_model_call(site, api):
    kill_mid_turn(site, api, "killed-model", "first")


@needs_services
def test_a_worker_killed_between_a_tool_step_and_the_turn_end(site, api):
    kill_mid_turn(site, api, "killed-tool", "after_tool")


@needs_services
def test_every_worker_killed_while_the_team_waits_for_approval(site, api):
    """The wait holds no worker: with every worker killed and started again, the PM's
    answer resumes the turn at its call, which runs once, and the model is not asked
    again for that step."""
    team = fault_team("approval-wait")
    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "ask"})
    team_actions.team_start(team=team)
    request = wait_for(
        lambda: PMRequest.objects.filter(team=team, status="open").first(),
        30,
        "the approval request",
        site,
    )
    # The request is committed just before the turn stops at it: wait for both.
    turn = wait_for(
        lambda: Turn.objects.filter(pk=request.turn_id, status=Turn.Status.WAITING).first(),
        30,
        "the turn to wait for the PM",
        site,
    )
    for process in site.processes:
        if process.name.startswith("worker-"):
            site.kill(process.name)
            process.start()
    site.wait_healthy(60)
    pm_requests.pm_request_answer(request_id=request.id, answer="Always approve")
    wait_for(lambda: settled(team), RECOVERY_SECONDS, "the team to finish its turns", site)
    assert_nothing_lost(team)
    # The step that asked, then the one reading the tool's result: no second ask.
    assert TurnStep.objects.filter(turn=turn, kind=TurnStep.Kind.MODEL).count() == 2
    assert PMRequest.objects.filter(team=team, kind=PMRequest.Kind.APPROVAL).count() == 1


@needs_services
def test_redis_stopped_and_restarted_mid_conversation(site, redis_server):
    team = fault_team("redis-restart")
    team_actions.team_start(team=team)
    wait_for(lambda: Turn.objects.filter(team=team, status="done").count() >= 2, 30, "2 turns")
    redis_server.stop()
    time.sleep(1.5)
    status, body = site.healthz()
    assert status == 503 and body["channel_layer"] == "error", body
    restarted_at = time.monotonic()
    redis_server.start()
    wait_for(lambda: settled(team), RECOVERY_SECONDS, "the team to finish its turns", site)
    print(f"\nRedis restart to the team's last turn: {time.monotonic() - restarted_at:.1f} s")
    assert_nothing_lost(team)
    site.wait_healthy(10)


@needs_services
def test_the_workers_database_connections_terminated_mid_turn(site, api):
    team = fault_team("pg-terminated")
    team_actions.team_start(team=team)
    wait_for(lambda: Turn.objects.filter(team=team, status="done").count() >= 2, 30, "2 turns")
    api.model.hold("first", 2)
    assert api.model.held.wait(20), site.logs()
    turn = running_turn(team)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name LIKE 'loom-worker-%%'"
        )
        assert cursor.fetchone()[0] >= 1
    wait_for(lambda: settled(team), RECOVERY_SECONDS, "the team to finish its turns", site)
    turns = assert_nothing_lost(team)
    assert turns[turn.number - 1].attempts == 2
    assert all(p.alive for p in site.processes), site.logs()


# --- the model server failing (in-process, any database) --------------------------


def hang(seconds: float = 5.0) -> Reply:
    return Reply([{"type": "text", "text": "too late"}], delay=seconds)


def server_error() -> Failure:
    return Failure(500, "api_error", "Internal server error")


@pytest.mark.parametrize(
    "failure",
    [rate_limited, overloaded, server_error, hang, Reset],
    ids=["429", "529", "500", "hang", "reset"],
)
def test_the_model_server_failing_once_is_retried_and_the_team_goes_on(
    db, messages_api, settings, failure
):
    # Long enough that a loaded machine's ordinary answer never times out (that
    # would be a retry the count below does not expect); the hang outlasts it.
    settings.LOOM_MODEL_TIMEOUT = 1.5
    model = Model()
    failed_once: set[str] = set()

    def script(request):
        key = f"{request.agent}:{len(request.body['messages'])}"
        if key not in failed_once:  # every call fails once, then is answered
            failed_once.add(key)
            return failure()
        return model(request)

    api = messages_api(script)
    team = fault_team("flaky")
    team.max_turns = 2
    team.save()
    team_actions.team_start(team=team)
    drain(team)
    assert settled(team)
    assert_nothing_lost(team, turns=2)
    assert all(t.attempts == 1 for t in Turn.objects.filter(team=team))
    assert len(api.requests) == 8  # 2 turns x 2 calls, each failing once first


def test_the_model_server_failing_past_the_retries_fails_the_turn_visibly(db, messages_api):
    api = messages_api(lambda request: server_error())
    team = fault_team("down")
    team_actions.team_start(team=team)
    (turn,) = drain(team)
    team.refresh_from_db()
    assert turn.status == Turn.Status.FAILED and "HTTP 500" in turn.error
    assert team.status == Team.Status.PAUSED
    note = Message.objects.filter(team=team, kind="system").last()
    assert "failed" in note.content and "resume" in note.content
    assert len(api.requests) == 3  # the first call and the client's two retries
    assert not Message.objects.filter(team=team, kind="peer").exists()


def test_a_sigkill_is_recovered_within_a_lease(settings):
    """The arithmetic the process tests measure: a dead worker's turn waits at most a
    lease after its last renewal plus a sweep, 25 s by default (5 min + 5 s before)."""
    from teams.engine import worker

    settings.LOOM_TURN_LEASE = 20
    assert settings.LOOM_TURN_LEASE + worker.sweep_seconds() <= 25
    assert worker.heartbeat_seconds() == 5
