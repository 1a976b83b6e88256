"""Every panel of the live view follows the team without a reload: the demo team runs
on the offline model while the PM watches one page, answering from the inbox in
another tab; consultations, files (and the header's count), anchors, keepers, an
approval and the drift cards' tactic and action appear live. A finished team shows its
outcome and "Run again" where the post box was.

Screenshots go to test-output/screenshots/."""

import re
import time

from django.core.management import call_command
from playwright.sync_api import expect

from teams.conversation import pm_requests
from teams.models import HUMAN_TEXT_LIMIT, PMRequest, Team
from tests.browser.conftest import SCREENSHOTS, log_in

LAPTOP = {"width": 1400, "height": 900}


def answer_open_requests(inbox, team) -> None:
    """Answer what the team asks, in the inbox tab (never on the watched page)."""
    for request in PMRequest.objects.filter(team=team, status="open"):
        item = inbox.locator(f'.pm-item[data-id="{request.id}"]')
        expect(item).to_be_visible(timeout=20_000)
        if request.kind == "approval":
            item.locator('button[value="Approve"]').click()
        else:
            item.locator('textarea[name="answer"]').fill("Only the core for now.")
            item.locator("button", has_text="Answer and resume").click()
        expect(inbox.locator(f'.pm-item[data-id="{request.id}"]')).to_have_count(0)


def test_every_panel_follows_the_demo_live_and_a_done_team_is_a_clear_end(
    start_site, browser, pm_user
):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    site = start_site(LOOM_OFFLINE_DELAY="0.1")
    context = browser.new_context(viewport=LAPTOP)
    live = context.new_page()
    log_in(live, site, next_url="/teams/demo/")
    inbox = context.new_page()
    inbox.goto(f"{site.url}/pm/")
    expect(live.locator("body[data-live=on]")).to_have_count(1)
    expect(live.locator("#workspace-link")).to_have_text("Workspace (0 files)")
    for empty in ("#no-consultations", "#no-files", "#no-anchors", "#no-keepers"):
        expect(live.locator(empty)).to_be_visible()
    expect(live.locator("#team-end")).to_be_hidden()
    live.click("button[value=start]")  # a form post: the page loads again
    expect(live.locator("#team-status")).to_have_text(re.compile("Running|Awaiting PM"))
    # A mark on this page's window: still there at the end, so nothing reloaded it.
    live.evaluate("() => { window.loomSameLoad = true; }")

    coder_action = live.locator('#drift-panel li[data-agent="coder"] dd[data-level="action"]')
    expect(coder_action).to_have_text(re.compile(r"^Propose the first part"), timeout=30_000)
    expect(
        live.locator('#drift-panel dd[data-level="tactic"]', has_text="(not set)")
    ).to_have_count(0, timeout=30_000)

    seen = set()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        team.refresh_from_db()
        if team.status == Team.Status.DONE:
            break
        answer_open_requests(inbox, team)
        for panel, row in (
            ("consultation", "#consultations li.consult-batch"),
            ("file", "#files li.file"),
            ("anchor", "#anchors li.anchor"),
            ("keeper", "#keepers li.keeper"),
        ):
            if panel not in seen and live.locator(row).count():
                seen.add(panel)
                live.locator(row).first.scroll_into_view_if_needed()
                live.screenshot(path=SCREENSHOTS / f"live-panel-{panel}.png")
        time.sleep(0.5)
    assert team.status == Team.Status.DONE, f"the demo did not finish: {team.status}"
    assert seen == {"consultation", "file", "anchor", "keeper"}

    # Each panel as the database has it, without a reload.
    files = team.workspace_files.count()
    assert files >= 1
    expect(live.locator("#workspace-link")).to_have_text(
        f"Workspace ({files} file{'s' if files != 1 else ''})"
    )
    expect(live.locator("#files li.file")).to_have_count(min(files, 10))
    expect(live.locator("#anchors li.anchor")).to_have_count(team.anchors.count())
    expect(live.locator("#anchor-count")).to_have_text(str(team.anchors.count()))
    expect(live.locator("#keepers li.keeper")).to_have_count(min(team.keepers.count(), 10))
    batch = live.locator("#consultations li.consult-batch").first
    newest = team.consultations.order_by("-id").first()
    expect(batch.locator(".consultant")).to_have_count(
        team.consultations.filter(batch=newest.batch).count()
    )
    expect(batch.locator(".consult-answer").first).not_to_be_empty()
    assert PMRequest.objects.filter(team=team, kind="approval", status="answered").exists()

    # Done: the outcome, "Run again" and no post box.
    expect(live.locator("#team-status")).to_have_text("Done", timeout=20_000)
    end = live.locator("#team-end")
    expect(end).to_be_visible()
    expect(live.locator("#post-form")).to_be_hidden()
    team.refresh_from_db()
    expect(live.locator("#team-outcome")).to_contain_text(
        f"Finished after {len(team.phases)} phases ({', '.join(team.phases)}), "
        f"{team.turn_count} turns, ${team.spent_usd:.4f}, {files} file"
    )
    expect(end.locator("#end-run-again")).to_be_visible()
    assert live.evaluate("() => window.loomSameLoad === true")
    end.scroll_into_view_if_needed()
    live.screenshot(path=SCREENSHOTS / "live-panels-done.png", full_page=True)

    # A reload shows the same end, rendered by the server.
    live.reload()
    expect(live.locator("#team-end")).to_be_visible()
    expect(live.locator("#post-form")).to_be_hidden()
    expect(live.locator("#team-outcome")).to_contain_text(f"{team.turn_count} turns")


def test_the_answer_box_shows_its_estimated_tokens(start_site, browser, pm_user):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    coach = team.agents.get(name="coach")
    pm_requests.pm_request_open(team=team, agent=coach, question="HTML or PDF?")
    site = start_site()
    page = browser.new_page(viewport=LAPTOP)
    log_in(page, site, next_url="/teams/demo/")
    expect(page.locator("#pm-request")).to_be_visible()
    estimate = page.locator("#pm-answer-estimate")
    page.fill("#pm-answer-text", "HTML.")
    expect(estimate).to_be_hidden()
    page.fill("#pm-answer-text", "word " * 480)  # 2,400 characters
    expect(estimate).to_have_text("About 600 tokens: every later turn reads this.")
    page.fill("#pm-answer-text", "x" * (HUMAN_TEXT_LIMIT + 1))
    expect(estimate).to_contain_text(
        f"Too long: {HUMAN_TEXT_LIMIT + 1:,} characters (about 5,001 tokens); at most "
        f"{HUMAN_TEXT_LIMIT:,} characters are accepted."
    )
    page.locator("#pm-request").screenshot(path=SCREENSHOTS / "answer-estimate.png")
