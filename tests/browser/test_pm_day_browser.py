"""The PM's day in a real browser: a live view that follows and can be left, times
and per-turn figures, cost against its budget, posting in place, limits on what is
pasted, a live team list, and a finished team that shows its outcome and runs again.

Each test saves screenshots to test-output/screenshots/ (the README's and docs/'s
come from there)."""

import re
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from teams import services
from teams.models import HUMAN_TEXT_LIMIT, Message, Team, Turn
from tests.browser.conftest import SCREENSHOTS, log_in
from tests.fakes.messages_api import FakeMessagesAPI, text
from tests.helpers import make_turn

LAPTOP = {"width": 1400, "height": 900}
# No column cut off: neither the page nor the admin's result table scrolls sideways.
FITS = """() => {
  const results = document.querySelector("#changelist .results");
  return document.documentElement.scrollWidth <= window.innerWidth
    && (!results || results.scrollWidth <= results.clientWidth);
}"""


def chatty(request):
    """Every agent says a few lines (so the conversation outgrows its box), and each
    call costs about $0.30 at Sonnet's prices."""
    lines = "\n".join(f"Point {n}: the plan holds for this part." for n in range(1, 5))
    return text(
        f"{request.agent} here.\n{lines}", input_tokens=100_000, output_tokens=100, delay=0.8
    )


def at_bottom(page) -> bool:
    return page.locator("#conversation").evaluate(
        "el => el.scrollHeight - el.scrollTop - el.clientHeight < 40"
    )


def test_live_view_follows_shows_figures_warns_on_budget_and_posts_in_place(
    start_site, browser, pm_user
):
    with FakeMessagesAPI(chatty) as api:
        call_command("loom_demo")
        # Twenty calls of $0.30 reach a $6 budget; the warning shows from $4.80.
        Team.objects.filter(slug="demo").update(max_cost_usd="6.00")
        site = start_site(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=api.url)
        page = browser.new_page(viewport=LAPTOP)
        log_in(page, site, next_url="/teams/demo/")
        expect(page.locator("body[data-live=on]")).to_have_count(1)
        expect(page.locator("#team-max-cost")).to_have_text("6.00")
        expect(page.locator("#budget-warnings li")).to_have_count(0)
        page.click("button[value=start]")

        # It follows while the reader is at the bottom.
        messages = page.locator("#conversation li.msg")
        expect(messages.nth(3)).to_be_attached(timeout=20_000)
        expect(page.locator("#conversation")).to_be_in_viewport()
        assert at_bottom(page)
        # Each message has its time (relative, exact on hover) and its turn's figures.
        first = messages.first
        expect(first.locator("time.when")).to_have_text(re.compile(r"just now|\d+ s ago"))
        assert re.match(r"\d{4}|\w", first.locator("time.when").get_attribute("title"))
        meta = first.locator(".turn-meta")
        expect(meta).to_have_text(re.compile(r"^100,100 tokens · \$0\.3015 · \d+\.\d s$"))
        assert "100,000 input" in meta.get_attribute("title")

        # A reader who scrolled up stays put and is offered the latest.
        page.locator("#conversation").evaluate("el => el.scrollTop = 0")
        count = messages.count()
        expect(messages.nth(count)).to_be_attached(timeout=20_000)
        jump = page.locator("#jump-latest")
        expect(jump).to_be_visible()
        expect(jump).to_have_text(re.compile(r"Jump to latest \(\d+ new\)"))
        assert page.locator("#conversation").evaluate("el => el.scrollTop") == 0
        page.screenshot(path=SCREENSHOTS / "live-jump-to-latest.png")
        jump.click()
        expect(jump).to_be_hidden()
        assert at_bottom(page)

        # From 80% of the cost budget the page warns; at the budget the team pauses.
        warning = page.locator("#budget-warnings li")
        expect(warning).to_contain_text("of the cost budget used", timeout=30_000)
        expect(warning).to_contain_text("of $6.00); the team pauses when it is reached.")
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=SCREENSHOTS / "live-budget-warning.png")
        expect(page.locator("#team-status")).to_have_text("Paused", timeout=30_000)
        expect(page.locator("#cost-meter")).to_have_attribute("max", "6")

        # Posting as PM confirms in place: no reload, the box is emptied, the
        # message arrives over the socket.
        page.locator("body").evaluate("body => body.dataset.sameLoad = 'yes'")
        page.fill("#post-content", "Hold on: HTML only.")
        page.click("#post-form button")
        expect(page.locator("#post-status")).to_have_text(
            "Posted; the next agent to speak reads it."
        )
        expect(page.locator("#post-content")).to_have_value("")
        expect(page.locator("#conversation li.kind-pm .content")).to_have_text(
            "Hold on: HTML only."
        )
        expect(page.locator("body[data-same-load=yes]")).to_have_count(1)
        page.locator("#post-form").scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOTS / "live-post-in-place.png")

        # A 200,000-character paste is refused with a clear message, nothing stored.
        pasted = "x" * 200_000
        page.fill("#post-content", pasted)
        expect(page.locator("#post-estimate")).to_contain_text(
            f"Too long: 200,000 characters (about 50,000 tokens); at most "
            f"{HUMAN_TEXT_LIMIT:,} characters are accepted."
        )
        page.click("#post-form button")
        expect(page.locator("#post-status")).to_have_text(
            f"The message has 200,000 characters; at most {HUMAN_TEXT_LIMIT:,} are accepted."
        )
        page.screenshot(path=SCREENSHOTS / "live-post-too-long.png")
        assert Message.objects.filter(kind="pm").count() == 1
        assert page.locator("#conversation li.kind-pm").count() == 1


def test_team_list_is_live(start_site, browser, pm_user):
    call_command("loom_demo")
    site = start_site()
    context = browser.new_context(viewport=LAPTOP)
    listing = context.new_page()
    log_in(listing, site, next_url="/")
    expect(listing.locator("body[data-live=on]")).to_have_count(1)
    row = listing.locator("tr[data-team=demo]")
    expect(row.locator("[data-field=status]")).to_have_text("Idle")
    expect(row.locator("[data-field=turns]")).to_have_text("0 / 200")

    live = context.new_page()
    live.goto(f"{site.url}/teams/demo/")
    live.click("button[value=start]")
    # The list follows without a reload: status, turns, and the coach's PM request.
    expect(row.locator("[data-field=status]")).to_have_text(re.compile("Running|Awaiting PM"))
    expect(row.locator("[data-field=turns]")).to_have_text(re.compile(r"^[1-9]\d* / 200$"))
    expect(row.locator("[data-field=requests]")).to_have_text("1", timeout=30_000)
    expect(listing.locator("#open-requests")).to_have_text("1")
    expect(row.locator("[data-field=status]")).to_have_text("Awaiting PM")
    listing.screenshot(path=SCREENSHOTS / "team-list-live.png")
    live.locator("button[value=pause]").dispatch_event("click")
    expect(row.locator("[data-field=status]")).to_have_text("Paused")
    # The whole list fits a laptop's screen: no column cut off.
    assert listing.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_done_team_shows_its_outcome_and_runs_again(start_site, browser, pm_user):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    services.anchor_save(team=team, key="output-format", value="HTML only.", changed_by="pm")
    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE, turn_count=42)
    site = start_site()
    page = browser.new_page(viewport=LAPTOP)
    log_in(page, site, next_url="/teams/demo/")
    expect(page.locator("#team-status")).to_have_text("Done")

    # A clear end: the outcome and "Run again" where the post box was; no post box.
    expect(page.locator("#post-form")).to_be_hidden()
    expect(page.locator("#team-outcome")).to_contain_text(
        f"Finished after {len(team.phases)} phases ({', '.join(team.phases)}), 42 turns, "
        "$0.0000, 0 files"
    )
    expect(page.locator("#team-outcome")).to_contain_text("run it again to go on")
    expect(page.locator("#end-run-again")).to_be_visible()
    page.locator("#team-end").scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / "done-team-end.png")
    assert not Message.objects.filter(kind="pm").exists()

    # "Run again" makes a fresh idle copy and opens it, ready to start.
    page.click("#end-run-again")
    page.wait_for_url(f"{site.url}/teams/demo-2/")
    expect(page.locator(".flash")).to_contain_text(
        "Made team 'demo-2' from 'demo': 4 agents, 1 anchor"
    )
    expect(page.locator("#team-status")).to_have_text("Idle")
    expect(page.locator("#team-turns")).to_have_text("0")
    expect(page.locator("button[value=start]")).to_be_visible()
    page.screenshot(path=SCREENSHOTS / "run-again.png")
    copy = Team.objects.get(slug="demo-2")
    assert (copy.goal, copy.phases) == (team.goal, team.phases)
    assert copy.anchors.get(key="output-format").value == "HTML only."
    # The copy runs: started from its page, its agents speak.
    page.click("button[value=start]")
    expect(page.locator("#conversation li.msg").first).to_be_visible(timeout=20_000)


def test_admin_lists_fit_a_laptop_and_show_seconds_and_durations(start_site, browser, pm_user):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    coach = team.agents.get(name="coach")
    started = timezone.now().replace(microsecond=0)
    make_turn(
        coach,
        number=1,
        status=Turn.Status.DONE,
        outcome=Turn.Outcome.MESSAGE,
        model="claude-sonnet-4-6",
        input_tokens=12_345,
        cache_read_tokens=50_000,
        output_tokens=678,
        cost_usd="0.012345",
        started_at=started,
        finished_at=started + timedelta(seconds=4.25),
    )
    site = start_site()
    page = browser.new_page(viewport=LAPTOP)
    log_in(page, site, next_url="/admin/teams/team/")
    expect(page.locator("#result_list")).to_contain_text("0 / 200")
    expect(page.locator("#result_list")).to_contain_text("$0.0000 / $5.00")
    assert page.evaluate(FITS)
    page.screenshot(path=SCREENSHOTS / "admin-teams.png")
    page.goto(f"{site.url}/admin/teams/turn/")
    row = page.locator("#result_list tbody tr").first
    expect(row).to_contain_text("62,345 / 678")
    expect(row).to_contain_text("$0.0123")
    expect(row).to_contain_text("4.2 s")
    expect(row).to_contain_text(started.strftime("%Y-%m-%d %H:%M:%S"))
    assert page.evaluate(FITS)
    page.screenshot(path=SCREENSHOTS / "admin-turns.png")
