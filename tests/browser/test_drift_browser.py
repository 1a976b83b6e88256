"""Drift in a real browser: the live view's panel follows the turns, the PM pins an
answer as an anchor, an agent below 40 is flagged, and the admin shows the score,
what it means and a chart with labelled axes."""

import re
import time

from django.core.management import call_command
from playwright.sync_api import expect

from teams.models import Agent, Anchor, Team, Turn
from teams.run import drift
from tests.browser.conftest import SCREENSHOTS, log_in

MEANING = re.compile(r"^(on track|some drift|significant drift)$")
AGENTS = ("coach", "researcher", "coder", "reviewer")


def wait_for_no_running_turn(team):
    """A turn running when the team stopped still finishes: wait until none runs."""
    deadline = time.monotonic() + 30
    while Turn.objects.filter(team=team, status=Turn.Status.RUNNING).exists():
        assert time.monotonic() < deadline, "a turn still runs 30 s after the team stopped"
        time.sleep(0.1)


def test_drift_panel_pinned_answer_flag_and_admin_chart(start_site, browser, pm_user):
    call_command("loom_demo")
    site = start_site(LOOM_OFFLINE_DELAY="0.05")
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    problems = []
    context.on(
        "console",
        lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page = context.new_page()
    page.on("pageerror", lambda error: problems.append(str(error)))
    log_in(page, site, next_url="/teams/demo/")
    expect(page.locator("body[data-live=on]")).to_have_count(1)

    # Before any turn: every agent is listed with a score and what it means; no
    # trajectory yet.
    panel = page.locator("#drift-panel")
    for name in AGENTS:
        item = panel.locator(f"li[data-agent={name}]")
        expect(item.locator(".drift-score")).to_have_text("70")
        expect(item.locator(".drift-meaning")).to_have_text("on track")
        expect(item.locator("dd[data-level=trajectory]")).to_have_text("(not set)")

    # Running: each agent declares its intent on its first turn (offline model); the
    # panel follows without a reload: scores, what they mean and the hierarchy.
    page.click("button[value=start]")
    for name in AGENTS:
        item = panel.locator(f"li[data-agent={name}]")
        expect(item.locator("dd[data-level=trajectory]")).to_contain_text(
            "Markdown notes", timeout=20_000
        )
        expect(item.locator(".drift-score")).to_have_text(re.compile(r"^\d{1,3}$"))
        expect(item.locator(".drift-meaning")).to_have_text(MEANING)
        expect(item.locator(".drift-advice")).to_have_text(re.compile(r"\S"))

    # The coach asks; the team waits for the PM (once the turn running then is over,
    # nothing moves): the coach's score is the one its fields give, live.
    expect(page.locator("#pm-request")).to_be_visible(timeout=30_000)
    team = Team.objects.get(slug="demo")
    wait_for_no_running_turn(team)
    coach = team.agents.get(name="coach")
    expect(panel.locator("li[data-agent=coach] .drift-score")).to_have_text(str(drift.score(coach)))

    # The PM answers in the live view and pins the answer.
    page.screenshot(path=SCREENSHOTS / "drift-live-view.png", full_page=True)
    form = page.locator("#pm-answer-form")
    form.locator("textarea[name=answer]").fill("HTML only for now.")
    form.locator("input[name=pin_as]").fill("output-format")
    form.locator("#pm-answer-button").click()
    expect(page.locator(".flash")).to_contain_text("Answer sent; team demo resumes.")
    anchor = Anchor.objects.get(team=team, key="output-format")
    assert anchor.value == "HTML only for now." and anchor.updated_by == "pm (pm)"
    expect(page.locator("body[data-live=on]")).to_have_count(1)
    page.locator("button[value=pause]").dispatch_event("click")
    expect(page.locator(".flash")).to_contain_text("Team 'demo' paused.")
    # A turn running when the team paused still finishes and shows its figures: wait
    # for it, so the coder's next figures come from the resumed turn alone.
    wait_for_no_running_turn(team)

    # A coder far off course (no trajectory, a tactic, three violations) is flagged
    # live when its next turn finishes (the team resumed from here: the site's
    # sweeper picks the turn up) ...
    coder = team.agents.get(name="coder")
    off_course = {"trajectory": "", "tactic": "Rewrite it all", "violations": 3}
    Agent.objects.filter(pk=coder.pk).update(**off_course)
    coder_item = panel.locator("li[data-agent=coder]")
    expect(coder_item.locator(".drift-meaning")).to_have_text("on track")
    page.locator("button[value=resume]").click()
    flag = page.locator("#drift-flags .drift-flag")
    expect(flag).to_have_text(re.compile(r"^⚠ coder: significant drift \(\d+\)$"), timeout=30_000)
    expect(coder_item.locator(".drift-meaning")).to_have_text("significant drift")
    # (Not the tactic's text here: the running coder may map a tactic of its own at
    # any turn. The page as it loads, below, shows the state the test sets.)
    # (The first pause's flash is still on this page: wait for the team to be paused,
    # not for that flash, or the next navigation cuts this pause off in flight.)
    expect(page.locator("button[value=pause]")).to_be_enabled()
    page.locator("button[value=pause]").dispatch_event("click")
    deadline = time.monotonic() + 10
    while Team.objects.get(pk=team.pk).status != "paused":
        assert time.monotonic() < deadline, "the team is not paused 10 s after the click"
        time.sleep(0.1)
    expect(page.locator(".flash")).to_contain_text("Team 'demo' paused.")

    # ... and on the pages as they load (once the turn running at the pause is over,
    # so nothing changes the coder behind the test's back).
    wait_for_no_running_turn(team)
    Agent.objects.filter(pk=coder.pk).update(**off_course)
    coder.refresh_from_db()
    score = drift.score(coder)
    assert score < 40
    page.goto(f"{site.url}/teams/demo/")
    expect(flag).to_have_text(f"⚠ coder: significant drift ({score})")
    expect(coder_item).to_have_class(re.compile("drift-flagged"))
    expect(coder_item.locator(".drift-meaning")).to_have_text("significant drift")
    expect(coder_item.locator(".drift-breaks")).to_contain_text("Tactic set without a trajectory.")
    expect(coder_item.locator("dd[data-level=tactic]")).to_have_text("Rewrite it all")
    coder_item.scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / "drift-live-view-flagged.png", full_page=True)
    page.goto(f"{site.url}/")
    expect(page.locator(".drift-flag")).to_have_text(f"⚠ coder: significant drift ({score})")
    page.screenshot(path=SCREENSHOTS / "drift-team-list.png", full_page=True)

    # The admin's agent page: the score and what it means, and the chart's axes.
    coach = team.agents.get(name="coach")
    coach.refresh_from_db()
    page.goto(f"{site.url}/admin/teams/agent/{coach.pk}/change/")
    summary = page.locator(".drift-summary")
    expect(summary.locator(".drift-score")).to_have_text(str(drift.score(coach)))
    expect(summary.locator(".drift-meaning")).to_have_text(drift.meaning(drift.score(coach)))
    expect(summary).to_contain_text("Guide the team through refinement")
    chart = page.locator("svg[role=img]")
    for label in ("turn", "drift score", "input tokens"):
        expect(chart.locator("text", has_text=re.compile(f"^{label}$"))).to_have_count(1)
    expect(chart.locator("rect.bar").first).to_be_attached()
    expect(chart.locator("polyline")).to_have_count(1)
    summary.scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / "drift-admin-agent.png", full_page=True)
    page.goto(f"{site.url}/admin/teams/agent/{coder.pk}/change/")
    expect(page.locator(".drift-summary .drift-meaning")).to_have_text("significant drift")
    assert problems == []
