"""A connected live view that lost events (a channel layer that drops them between the
commit and the socket) shows them without a reload, in order, none twice."""

import json

from playwright.sync_api import expect

from tests.browser.conftest import SCREENSHOTS, log_in
from tests.helpers import make_team


def test_a_page_that_lost_events_shows_them_without_a_reload(start_site, browser, pm_user):
    make_team()
    site = start_site(DJANGO_SETTINGS_MODULE="tests.fakes.faulty_layer_settings")
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    errors, frames = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "websocket",
        lambda ws: ws.on("framereceived", lambda frame: frames.append(json.loads(frame))),
    )
    log_in(page, site, next_url="/teams/alpha/")
    expect(page.locator("body[data-live=on]")).to_have_count(1)
    page.evaluate("window.sameDocument = true")  # gone if the page reloads

    lines = [
        "one",
        "two (lost in transit)",
        "three",
        "four (lost in transit)",  # the last: no later event shows the gap
    ]
    for line in lines:
        page.fill("#post-content", line)
        page.click("#post-form button")
        expect(page.locator("#post-status.post-ok")).to_be_visible()
        page.evaluate("document.getElementById('post-status').className = ''")

    said = page.locator("#conversation li[data-id] .content")
    expect(said).to_have_text(lines, timeout=15_000)
    page.wait_for_timeout(2500)  # a late duplicate would show by now
    expect(said).to_have_text(lines)
    assert page.evaluate("window.sameDocument") is True
    assert page.locator("#catch-up-note").count() == 0
    assert not errors, errors
    # The lost ones really were lost live: they came from the database (catch_up).
    created = {f["message"]["content"]: f for f in frames if f["event"] == "message.created"}
    assert [line for line in lines if created[line].get("catch_up")] == lines[1::2]
    assert [created[line]["seq"] for line in lines] == [1, 2, 3, 4]
    page.screenshot(path=SCREENSHOTS / "live-caught-up.png", full_page=True)
