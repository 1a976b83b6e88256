"""The real site in a child process on the test database: `manage.py serve` (daphne,
the turn workers, the sweeper, WebSockets) and other management commands, as an
operator runs them. Tests that use it need `transactional_db`: the child reads what
the test committed.

The child gets a clean environment (none of this process's ANTHROPIC_* or LOOM_*
variables) plus the test database's URL and what the caller adds, and runs on the
project's settings with the suite's one-round password hasher
(tests/fakes/site_settings.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
# LOOM_TEST_OUTPUT: another folder for a run beside this one (make test's PostgreSQL run).
OUTPUT = ROOT / os.environ.get("LOOM_TEST_OUTPUT", "test-output")
# A deadline, not a wait: the site answers within seconds on an idle machine, but a
# child's imports on 2 cores shared with a whole suite (or more) have taken over 30 s.
START_SECONDS = 90
STOP_SECONDS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url() -> str:
    """The test database as a LOOM_DATABASE_URL (SQLite file or PostgreSQL)."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def child_env(**extra_env) -> dict:
    """The environment of a child process on the test database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LOOM_"))}
    env.update(
        LOOM_DATABASE_URL=database_url(),
        # The offline model's pause per call: long enough that a page sees its text
        # stream into the speaking box, short enough that a demo run takes seconds.
        LOOM_OFFLINE_DELAY="0.1",
        LOOM_SECRET_KEY="live-site-test-secret-key",
        # The project's settings but for the password hasher (tests/fakes/site_settings.py).
        DJANGO_SETTINGS_MODULE="tests.fakes.site_settings",
    )
    env.update(extra_env)
    return env


def manage(*args: str, timeout: float = 60, **extra_env) -> subprocess.CompletedProcess:
    """Run `manage.py ARGS` on the test database; raise with its output if it fails."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=child_env(**extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"manage.py {' '.join(args)} exited with {done.returncode}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return done


class Site:
    def __init__(self, url, process, log_path):
        self.url, self.process, self.log_path = url, process, log_path

    @property
    def ws_url(self) -> str:
        return "ws" + self.url.removeprefix("http")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


class Sites:
    """Starts `manage.py serve` processes for one test and stops them all on close."""

    def __init__(self, name: str):
        self.name = name
        self.sites: list[Site] = []

    def start(self, **extra_env) -> Site:
        """Serve on a free port; extra environment as keywords. Returns once the
        site answers HTTP."""
        port = free_port()
        OUTPUT.mkdir(parents=True, exist_ok=True)
        suffix = f"-{len(self.sites) + 1}" if self.sites else ""
        log_path = OUTPUT / f"serve-{self.name}{suffix}.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--port", str(port)],
                cwd=ROOT,
                env=child_env(**extra_env),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        site = Site(f"http://127.0.0.1:{port}", process, log_path)
        self.sites.append(site)
        # No proxy from the environment between the test and its own child.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                opener.open(site.url + "/admin/login/", timeout=1)
                return site
            except OSError:
                if process.poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError(f"the site did not start:\n{site.log()}")

    def close(self) -> None:
        for site in self.sites:
            site.process.terminate()
        for site in self.sites:
            # A site stops within a second or two; one whose turn is retrying a model
            # call to a fake the test has stopped waits out the SDK's back-off: killed.
            try:
                site.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                site.process.kill()
                site.process.wait(timeout=10)


@pytest.fixture
def start_site(transactional_db, request):
    """Start `manage.py serve` on the test database; extra environment as keywords.
    (Import it into a conftest.py to use it.)"""
    sites = Sites(request.node.name)
    yield sites.start
    sites.close()
