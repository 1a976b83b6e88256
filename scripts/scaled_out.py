"""Start Loom's scaled-out layout locally on PostgreSQL and Redis, as deploy/Procfile
and the systemd units run it in production: N daphne web processes, M turn workers
(`manage.py runworker loom.turns`) and one sweeper (`manage.py sweep`). Waits until
/healthz answers 200 with every worker live, then runs until Ctrl-C (or, with --check,
stops at once) and stops every process cleanly.

Usage:
    python scripts/scaled_out.py [--web 2] [--workers 2]
        [--database-url postgres://postgres@127.0.0.1:5432/loom]
        [--redis-url redis://127.0.0.1:6379/0] [--check]

Ports are chosen free. The tests (tests/teams/test_faults.py) use Layout directly:
each process gets an application_name on its database connections (loom-web-1,
loom-worker-1, loom-sweeper) so a test can find and terminate them."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/loom"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_application_name(database_url: str, name: str) -> str:
    """The URL with ?application_name=NAME (PostgreSQL shows it in pg_stat_activity)."""
    parts = urlsplit(database_url)
    if not parts.scheme.startswith("postgres"):
        return database_url
    query = dict(parse_qsl(parts.query))
    query["application_name"] = name
    return urlunsplit(parts._replace(query=urlencode(query)))


@dataclass
class Process:
    name: str
    argv: list[str]
    env: dict
    log_path: Path
    port: int | None = None
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log_path.open("a") as log:
            self.popen = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


@dataclass
class Layout:
    """The processes of one scaled-out site; start(), then stop() (or use `with`)."""

    database_url: str
    redis_url: str
    web: int = 2
    workers: int = 2
    env: dict = field(default_factory=dict)  # more environment for every process
    log_dir: Path = ROOT / "test-output" / "scaled-out"
    migrate: bool = True
    processes: list[Process] = field(default_factory=list)

    def _env(self, name: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LOOM_"))}
        env.update(
            DJANGO_SETTINGS_MODULE="loomsite.settings",
            LOOM_DATABASE_URL=with_application_name(self.database_url, f"loom-{name}"),
            LOOM_REDIS_URL=self.redis_url,
            PYTHONUNBUFFERED="1",
        )
        env.setdefault("LOOM_SECRET_KEY", "scaled-out-local-key-not-for-production")
        env.update(self.env)
        return env

    def _process(self, name: str, argv: list[str], port: int | None = None) -> Process:
        return Process(name, argv, self._env(name), self.log_dir / f"{name}.log", port)

    def start(self, timeout: float = 60) -> Layout:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for old in self.log_dir.glob("*.log"):
            old.unlink()
        python = sys.executable
        if self.migrate:
            subprocess.run(
                [python, "manage.py", "migrate", "--noinput"],
                cwd=ROOT,
                env=self._env("migrate"),
                check=True,
                capture_output=True,
            )
        for i in range(1, self.web + 1):
            port = free_port()
            argv = [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            self.processes.append(
                self._process(f"web-{i}", [*argv, "loomsite.asgi:application"], port)
            )
        for i in range(1, self.workers + 1):
            argv = [python, "manage.py", "runworker", "loom.turns"]
            self.processes.append(self._process(f"worker-{i}", argv))
        self.processes.append(self._process("sweeper", [python, "manage.py", "sweep"]))
        for process in self.processes:
            process.start()
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p.port}" for p in self.processes if p.port]

    def get(self, name: str) -> Process:
        return next(p for p in self.processes if p.name == name)

    def healthz(self, url: str | None = None) -> tuple[int, dict]:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open((url or self.urls[0]) + "/healthz", timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def wait_healthy(self, timeout: float = 60, workers: int | None = None) -> dict:
        """Until every web process answers /healthz 200 with `workers` (all) live."""
        workers = self.workers if workers is None else workers
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            dead = [p for p in self.processes if not p.alive]
            if dead:
                raise RuntimeError(
                    "exited: " + ", ".join(f"{p.name}:\n{p.log()[-3000:]}" for p in dead)
                )
            try:
                answers = [self.healthz(url) for url in self.urls]
                last = answers
                if all(s == 200 and b["workers"]["live"] >= workers for s, b in answers):
                    return answers[0][1]
            except (OSError, ValueError) as exc:
                last = exc
            time.sleep(0.2)
        raise TimeoutError(f"the layout did not become healthy: {last}\n{self.logs()}")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.get(name)
        process.popen.send_signal(sig)
        process.popen.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.log()[-4000:]}" for p in self.processes)

    def stop(self, timeout: float = 10) -> None:
        for process in self.processes:
            if process.alive:
                process.popen.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process.popen is None:
                continue
            try:
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait(timeout=10)

    def __enter__(self) -> Layout:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--web", type=int, default=2, help="daphne processes (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="turn workers (default 2)")
    parser.add_argument(
        "--database-url", default=os.environ.get("LOOM_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    parser.add_argument("--redis-url", default=os.environ.get("LOOM_REDIS_URL", DEFAULT_REDIS_URL))
    parser.add_argument("--check", action="store_true", help="stop once healthy (a smoke test)")
    args = parser.parse_args()
    extra = {k: v for k, v in os.environ.items() if k.startswith(("ANTHROPIC_", "LOOM_"))}
    for name in ("LOOM_DATABASE_URL", "LOOM_REDIS_URL"):
        extra.pop(name, None)
    layout = Layout(args.database_url, args.redis_url, args.web, args.workers, env=extra)
    started = time.monotonic()
    layout.start()
    try:  # whatever happens from here (Ctrl-C, a closed stdout), every process stops
        took = time.monotonic() - started
        print(f"Healthy in {took:.1f} s: {json.dumps(layout.healthz()[1])}", flush=True)
        for process in layout.processes:
            where = f" on {process.port}" if process.port else ""
            print(f"  {process.name}{where} (pid {process.popen.pid}), log {process.log_path}")
        if not args.check:
            print("Ctrl-C stops every process.")
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    finally:
        layout.stop()
        print("Stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
