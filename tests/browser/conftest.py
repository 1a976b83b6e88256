"""Browser tests: the real site (`manage.py serve`: daphne, workers, WebSockets) in a
child process on the test database, driven by Playwright in Debian's Chromium.

Skipped, loudly, when no Chromium is installed (`apt-get install chromium`)."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.db import connection, connections

from tests.helpers import PASSWORD, make_user

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"
SCREENSHOTS = OUTPUT / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the dev extras install it
    sync_playwright = None


def pytest_collection_modifyitems(config, items):
    if CHROMIUM and sync_playwright is not None:
        return
    for item in items:
        if "tests/browser" in str(item.fspath):
            item.add_marker(
                pytest.mark.skip(
                    reason="BROWSER TESTS SKIPPED: no Chromium (apt-get install chromium)"
                )
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Site:
    def __init__(self, url, process, log_path):
        self.url, self.process, self.log_path = url, process, log_path

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


@pytest.fixture
def start_site(transactional_db, request):
    """Start `manage.py serve` on the test database; extra environment as keywords."""
    sites = []

    def start(**extra_env) -> Site:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LOOM_"))}
        env.update(
            LOOM_DATABASE_URL=_database_url(),
            LOOM_OFFLINE_DELAY="0.4",
            LOOM_SECRET_KEY="browser-test-secret-key",
            DJANGO_SETTINGS_MODULE="loomsite.settings",
        )
        env.update(extra_env)
        OUTPUT.mkdir(exist_ok=True)
        log_path = OUTPUT / f"serve-{request.node.name}.log"
        log = log_path.open("w")
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        site = Site(f"http://127.0.0.1:{port}", process, log_path)
        sites.append(site)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(site.url + "/admin/login/", timeout=1)
                return site
            except OSError:
                if process.poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError(f"the site did not start:\n{site.log()}")

    yield start
    for site in sites:
        site.process.terminate()
        try:
            site.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            site.process.kill()


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the test's own ORM
    # calls are plain synchronous code and safe here.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        # ORM calls made while Playwright's loop ran used their own connection.
        connections.close_all()
        browser.close()


@pytest.fixture
def pm_user(transactional_db):
    return make_user("pm", superuser=True)


def log_in(page, site, username="pm", password=PASSWORD, next_url="/"):
    page.goto(f"{site.url}/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{site.url}{next_url}")
