"""Browser tests: the real site (`manage.py serve`: daphne, workers, WebSockets) in a
child process on the test database, driven by Playwright in Debian's Chromium.

Skipped, loudly, when no Chromium is installed (`apt-get install chromium`)."""

import os
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


@pytest.fixture(scope="package")
def chromium():
    """One Chromium for the browser tests a process runs (a launch costs about a second
    of CPU). Playwright's sync API runs an event loop in this thread from here on; the
    tests' own ORM calls (and the database's flush after each) are plain synchronous
    code and safe here, so Django is told not to refuse them."""
    allowed = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if allowed is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = allowed


@pytest.fixture
def browser(chromium):
    """The shared Chromium; what a test opens in it (contexts, their pages and cookies)
    is closed after the test, so the next starts with none."""
    yield chromium
    for context in chromium.contexts:
        context.close()
    # ORM calls made while Playwright's loop ran used their own connection.
    connections.close_all()


@pytest.fixture
def pm_user(transactional_db):
    return make_user("pm", superuser=True)


def log_in(page, site, username="pm", password=PASSWORD, next_url="/"):
    page.goto(f"{site.url}/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{site.url}{next_url}")
