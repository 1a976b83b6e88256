"""Throughput: many teams at once against a model that takes a fixed time per reply.

Every team has four agents on a Claude model; the model is the fake Messages API
server (tests/fakes/messages_api.py), which answers each call with one short line
after `--latency` seconds (0.5 by default). With one call in flight per team at all
times, the physical limit is teams / latency model calls per second (each turn here
is one call). Prints model calls and turns per second against that limit, and the
p50/p95 wait from "turn queued" to "turn started".

Two layouts:
- embedded (default): one `manage.py serve` (daphne, the turn worker and the
  sweeper in one process) on a fresh SQLite database;
- scaled out (`--postgres URL --redis URL`): one `daphne`, `--workers` processes of
  `manage.py runworker loom.turns` and one `manage.py sweep`, on a fresh PostgreSQL
  database (`loom_bench_throughput`, dropped and made again) and Redis.

Teams are started through the REST API, as a program would.

Run: .venv/bin/python bench/throughput.py [--teams 16] [--seconds 20] [--latency 0.5]
     .venv/bin/python bench/throughput.py --teams 64 --workers 2 \\
         --postgres postgres://postgres@127.0.0.1:5432/test --redis redis://127.0.0.1:6379/5
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BENCH_DB = "loom_bench_throughput"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_postgres(url: str) -> str:
    """The URL of a fresh bench database on the server `url` names."""
    import psycopg

    parts = urlsplit(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    return urlunsplit(parts._replace(path=f"/{BENCH_DB}"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=2, help="runworker processes (scaled out)")
    parser.add_argument("--postgres", help="a PostgreSQL server URL: the scaled-out layout")
    parser.add_argument("--redis", help="a Redis URL (with --postgres)")
    args = parser.parse_args()
    if bool(args.postgres) != bool(args.redis):
        parser.error("the scaled-out layout needs both --postgres and --redis")

    data = tempfile.mkdtemp(prefix="loom-throughput-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LOOM_"))}
    env.update(
        LOOM_DATA_DIR=data,
        LOOM_DEBUG="0",
        LOOM_SECRET_KEY="bench-only-" + os.urandom(16).hex(),
        LOOM_API_RATE="100000/min",
        ANTHROPIC_API_KEY="sk-bench",
        DJANGO_SETTINGS_MODULE="loomsite.settings",
        NO_PROXY="127.0.0.1,localhost",
    )
    if args.postgres:
        env["LOOM_DATABASE_URL"] = fresh_postgres(args.postgres)
        env["LOOM_REDIS_URL"] = args.redis
    os.environ.update(env)

    from tests.fakes.messages_api import FakeMessagesAPI, text

    calls: list[float] = []
    lock = threading.Lock()

    def reply(request):
        with lock:
            calls.append(time.monotonic())
        return text("Noted; carrying on.", delay=args.latency)

    with FakeMessagesAPI(reply) as api:
        env["ANTHROPIC_BASE_URL"] = os.environ["ANTHROPIC_BASE_URL"] = api.url
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        token = make_teams(args.teams)
        processes, url = start_layout(args, env, data)
        try:
            wait_for(url)
            started = time.monotonic()
            start_teams(url, token, args.teams)
            time.sleep(min(3.0, args.seconds / 4))  # every team in its rhythm
            window_start = time.monotonic()
            from django.utils import timezone

            wall_start = timezone.now()
            time.sleep(args.seconds)
            window_end = time.monotonic()
            wall_end = timezone.now()
            report(args, calls, window_start, window_end, wall_start, wall_end, started)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def make_teams(count: int) -> str:
    from django.contrib.auth import get_user_model

    from teams import services
    from teams.models import Team

    for n in range(count):
        team = services.team_create(
            slug=f"t{n:03d}",
            goal="Keep talking.",
            phases=["work"],
            max_turns=100_000,
            agents=[
                {"name": name, "role": name, "model": "claude-sonnet-4-6"}
                for name in ("coach", "researcher", "coder", "reviewer")
            ],
        )
        Team.objects.filter(pk=team.pk).update(max_cost_usd=100_000)
    user = get_user_model().objects.create_superuser("bench", "bench@example.test", "x" * 20)
    _, key = services.api_token_create(user=user, label="bench")
    return key


def start_layout(args, env, data) -> tuple[list[subprocess.Popen], str]:
    port = free_port()
    log = open(Path(data) / "processes.log", "w")  # noqa: SIM115 - kept open for the run
    python = sys.executable

    def spawn(*command):
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    if not args.postgres:
        return [spawn(python, "manage.py", "serve", "--port", str(port))], f"http://127.0.0.1:{port}"
    daphne = str(Path(python).with_name("daphne"))
    processes = [spawn(daphne, "-b", "127.0.0.1", "-p", str(port), "loomsite.asgi:application")]
    worker = (python, "manage.py", "runworker", "loom.turns")
    processes += [spawn(*worker) for _ in range(args.workers)]
    processes.append(spawn(python, "manage.py", "sweep"))
    return processes, f"http://127.0.0.1:{port}"


def wait_for(url: str) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            opener.open(url + "/admin/login/", timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the site did not start")


def start_teams(url: str, token: str, count: int) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for n in range(count):
        request = urllib.request.Request(
            f"{url}/api/teams/t{n:03d}/start",
            method="POST",
            data=b"",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with opener.open(request, timeout=30) as response:
            assert json.load(response)["status"] == "running"


def report(args, calls, window_start, window_end, wall_start, wall_end, started) -> None:
    from teams.models import Turn

    seconds = window_end - window_start
    in_window = sum(window_start <= t < window_end for t in calls)
    finished = Turn.objects.filter(finished_at__gte=wall_start, finished_at__lt=wall_end)
    began = Turn.objects.filter(started_at__gte=wall_start, started_at__lt=wall_end)
    waits = sorted(
        (t.started_at - t.queued_at).total_seconds() * 1000
        for t in began.only("started_at", "queued_at")
    )
    limit = args.teams / args.latency
    rate = in_window / seconds
    layout = (
        f"scaled out: PostgreSQL + Redis, 1 daphne, {args.workers} runworker, 1 sweep"
        if args.postgres
        else "embedded: one manage.py serve on SQLite"
    )
    print(f"layout: {layout}")
    print(f"teams: {args.teams}; model latency {args.latency} s; window {seconds:.1f} s")
    print(f"physical limit (one call in flight per team): {limit:.1f} model calls/s")
    print(f"model calls/s: {rate:.1f} ({100 * rate / limit:.0f}% of the limit)")
    print(f"turns finished/s: {finished.count() / seconds:.1f}")
    if waits:
        p50 = statistics.median(waits)
        p95 = waits[max(0, int(len(waits) * 0.95) - 1)]
        print(f"wait from queued to started: p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    failed = Turn.objects.filter(status=Turn.Status.FAILED).count()
    print(f"failed turns: {failed}; calls in all: {len(calls)}")


if __name__ == "__main__":
    main()
