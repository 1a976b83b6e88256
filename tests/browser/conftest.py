"""Browser tests: the real site (`manage.py serve`: daphne, workers, WebSockets) in a
child process on the test database, driven by Playwright in Debian's Chromium.

Skipped, loudly, when no Chromium is installed (`apt-get install chromium`)."""

import shutil

import pytest
from django.db import connections

from tests.helpers import PASSWORD, make_user
from tests.live_site import OUTPUT, start_site  # noqa: F401 - the fixture, for these tests

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
