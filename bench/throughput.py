"""Throughput: many teams at once against a model that takes a fixed time per reply.

Every team has four agents on a Claude model; the model is the fake Messages API
server (tests/fakes/messages_api.py), which answers each call with one short line
after `--latency` seconds (0.5 by default). With one call in flight per team at all
times, the physical limit is teams / latency model calls per second (each turn here
is one call). Prints model calls and turns per second against that limit, the
p50/p95 wait from "turn queued" to "turn started", and the CPU each process used in
the window, from its own CPU time (/proc/<pid>/stat: user + system, every thread):
the workers' CPU milliseconds per model call, and the sweeper's share of a core.

`--idle` starts the same processes with the teams made but none running and prints
each process's share of a core over `--seconds`: what an idle deployment costs.

Two layouts:
- embedded (default): one `manage.py serve` (daphne, the turn worker and the
  sweeper in one process) on a fresh SQLite database;
- scaled out (`--postgres URL --redis URL`): one `daphne`, `--workers` processes of
  `manage.py runworker loom.turns` and one `manage.py sweep`, on a fresh PostgreSQL
  database (`--bench-db`, loom_bench_throughput by default, dropped and made again)
  and Redis.

Teams are started through the REST API, as a program would.

Run: .venv/bin/python bench/throughput.py [--teams 16] [--seconds 20] [--latency 0.5]
     .venv/bin/python bench/throughput.py --teams 64 --workers 2 \\
         --postgres postgres://postgres@127.0.0.1:5432/test --redis redis://127.0.0.1:6379/5 \\
         [--layer pubsub]
     .venv/bin/python bench/throughput.py --idle --seconds 30 [--postgres ... --redis ...]
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
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user + system, all its threads), from the kernel."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_postgres(url: str, name: str) -> str:
    """The URL of a fresh bench database `name` on the server `url` names."""
    import psycopg

    if not name.isidentifier():
        raise SystemExit(f"--bench-db {name!r} is not a plain database name")
    parts = urlsplit(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return urlunsplit(parts._replace(path=f"/{name}"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=2, help="runworker processes (scaled out)")
    parser.add_argument("--postgres", help="a PostgreSQL server URL: the scaled-out layout")
    parser.add_argument("--redis", help="a Redis URL (with --postgres)")
    parser.add_argument("--bench-db", default=BENCH_DB, help="the database made on --postgres")
    parser.add_argument(
        "--idle", action="store_true", help="start no team: each process's CPU when idle"
    )
    parser.add_argument(
        "--no-stuck-checks",
        action="store_true",
        help="turn the stuck checks off (on by default, as users run them)",
    )
    parser.add_argument(
        "--layer",
        choices=["core", "pubsub"],
        default="core",
        help="scaled out: channels-redis's default layer (core) or RedisPubSubChannelLayer",
    )
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
        env["LOOM_DATABASE_URL"] = fresh_postgres(args.postgres, args.bench_db)
        env["LOOM_REDIS_URL"] = args.redis
        if args.layer == "pubsub":
            env["DJANGO_SETTINGS_MODULE"] = "bench.pubsub_settings"
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
        token = make_teams(args.teams, stuck_checks=not args.no_stuck_checks)
        processes, url = start_layout(args, env, data)
        try:
            wait_for(url)
            wait_for_workers(sum(p.runs_turns for p in processes))
            time.sleep(3.0)  # the sweeper past its start-up too
            if args.idle:
                report_cpu(processes, *measure_cpu(processes, args.seconds), calls=None)
                return
            start_teams(url, token, args.teams)
            time.sleep(min(3.0, args.seconds / 4))  # every team in its rhythm
            window_start = time.monotonic()
            from django.utils import timezone

            wall_start = timezone.now()
            cpu_before = {p.pid: cpu_seconds(p.pid) for p in processes}
            others_before = other_cpu(args)
            time.sleep(args.seconds)
            window_end = time.monotonic()
            cpu_used = {p.pid: cpu_seconds(p.pid) - cpu_before[p.pid] for p in processes}
            others_after = other_cpu(args)
            wall_end = timezone.now()
            report(args, calls, window_start, window_end, wall_start, wall_end)
            in_window = sum(window_start <= t < window_end for t in calls)
            report_cpu(processes, cpu_used, window_end - window_start, calls=in_window)
            report_other_cpu(others_before, others_after, window_end - window_start, in_window)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def make_teams(count: int, stuck_checks: bool = True) -> str:
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
        # No cost cap; the stuck checks stay on (the defaults users run) unless told.
        # (At 0.5 s a call a team takes about 45 turns in the window: under the
        # default phase budget of 60, so no team stops to ask the PM.)
        Team.objects.filter(pk=team.pk).update(max_cost_usd=100_000)
        if not stuck_checks:
            Team.objects.filter(pk=team.pk).update(
                max_exchanges=0, max_pass_rounds=0, max_phase_turns=0
            )
    user = get_user_model().objects.create_superuser("bench", "bench@example.test", "x" * 20)
    _, key = services.api_token_create(user=user, label="bench")
    return key


def measure_cpu(processes, seconds: float) -> tuple[dict[int, float], float]:
    """Each process's CPU seconds over the next `seconds`, and the window's length."""
    before = {p.pid: cpu_seconds(p.pid) for p in processes}
    start = time.monotonic()
    time.sleep(seconds)
    used = {p.pid: cpu_seconds(p.pid) - before[p.pid] for p in processes}
    return used, time.monotonic() - start


def report_cpu(processes, used: dict[int, float], seconds: float, calls: int | None) -> None:
    """Each process's share of a core; with `calls`, the turn workers' CPU per call."""
    load = os.getloadavg()
    print(f"machine load (1, 5 min): {load[0]:.2f}, {load[1]:.2f} on {os.cpu_count()} cores")
    for process in processes:
        share = 100 * used[process.pid] / seconds
        print(
            f"cpu {process.role}: {share:.1f}% of a core ({used[process.pid]:.2f} s in the "
            f"window; {cpu_seconds(process.pid):.2f} s since it started, imports included)"
        )
    if calls:
        workers = [p for p in processes if p.runs_turns]
        spent = sum(used[p.pid] for p in workers)
        print(
            f"worker CPU per model call: {1000 * spent / calls:.1f} ms "
            f"({spent:.2f} s over {calls} calls, {len(workers)} process(es) running turns)"
        )


def other_cpu(args) -> dict[str, dict[int, float]]:
    """CPU seconds so far of this process (the fake model server's threads are most of
    it) and, scaled out, of the PostgreSQL backends serving the bench database."""
    found = {"bench process (fake Messages API)": {os.getpid(): cpu_seconds(os.getpid())}}
    if args.postgres:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
            pids = [row[0] for row in cursor.fetchall()]
        backends = {}
        for pid in pids:
            try:
                backends[pid] = cpu_seconds(pid)
            except OSError:  # another machine's server, or gone already
                pass
        found["PostgreSQL backends of the bench database"] = backends
        import redis

        # The whole server's CPU (INFO cpu): an upper bound when others share it.
        info = redis.Redis.from_url(args.redis).info("cpu")
        found["Redis server (all its clients)"] = {0: info["used_cpu_user"] + info["used_cpu_sys"]}
    return found


def report_other_cpu(before, after, seconds: float, calls: int) -> None:
    for name, now in after.items():
        # A backend opened in the window counts from zero; one closed in it is missed.
        spent = sum(cpu - before[name].get(pid, 0.0) for pid, cpu in now.items())
        per_call = f", {1000 * spent / calls:.1f} ms per model call" if calls else ""
        print(f"cpu {name}: {100 * spent / seconds:.1f}% of a core{per_call}")


def start_layout(args, env, data) -> tuple[list[subprocess.Popen], str]:
    port = free_port()
    log = open(Path(data) / "processes.log", "w")  # noqa: SIM115 - kept open for the run
    python = sys.executable

    def spawn(role, *command, runs_turns=False):
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        process.role, process.runs_turns = role, runs_turns
        return process

    if not args.postgres:
        serve = spawn(
            "serve (daphne + worker + sweeper)",
            *(python, "manage.py", "serve", "--port", str(port)),
            runs_turns=True,
        )
        return [serve], f"http://127.0.0.1:{port}"
    daphne = str(Path(python).with_name("daphne"))
    processes = [
        spawn("daphne", daphne, "-b", "127.0.0.1", "-p", str(port), "loomsite.asgi:application")
    ]
    worker = (python, "manage.py", "runworker", "loom.turns")
    processes += [
        spawn(f"runworker {n + 1}", *worker, runs_turns=True) for n in range(args.workers)
    ]
    processes.append(spawn("sweep", python, "manage.py", "sweep"))
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


def wait_for_workers(count: int) -> None:
    """Until every turn worker has beaten once: past its imports, listening. (Without
    this, start-up under load ate into the window: seconds of imports per process.)"""
    from teams.models import WorkerHeartbeat

    deadline = time.monotonic() + 180
    while WorkerHeartbeat.objects.count() < count:
        if time.monotonic() > deadline:
            raise SystemExit("the turn workers did not start")
        time.sleep(0.2)


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


def report(args, calls, window_start, window_end, wall_start, wall_end) -> None:
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
        f"scaled out: PostgreSQL + Redis ({args.layer} layer), 1 daphne, "
        f"{args.workers} runworker, 1 sweep"
        if args.postgres
        else "embedded: one manage.py serve on SQLite"
    )
    print(f"layout: {layout}")
    checks = "off" if args.no_stuck_checks else "on (the defaults)"
    print(f"teams: {args.teams}; model latency {args.latency} s; window {seconds:.1f} s")
    print(f"stuck checks: {checks}")
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
