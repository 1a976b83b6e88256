"""The eval pages in a real browser: a run's page (its cases, their teams, the failing
checks' detail), the compare form, and the compare page with the changed verdicts."""

from playwright.sync_api import expect

from teams.models import EvalRun
from tests.browser.conftest import SCREENSHOTS, log_in
from tests.live_site import manage
from tests.teams.evals.helpers import case, suite_file


def test_a_run_page_and_the_compare_page(start_site, browser, pm_user, tmp_path, private_data_dir):
    suite = suite_file(tmp_path, [case("steady"), case("fragile", checks=[{"max_turns": 40}])])
    # As an operator runs them: the command in a process of its own, on this database.
    env = {"LOOM_OFFLINE_DELAY": "0", "LOOM_DATA_DIR": str(private_data_dir)}
    manage("eval", "run", str(suite), "--concurrency", "1", timeout=120, **env)
    manage("eval", "run", str(suite), "--set", "max_turns=3", timeout=120, **env)
    first, second = EvalRun.objects.order_by("id")
    site = start_site(LOOM_DATA_DIR=str(private_data_dir))
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    problems = []
    context.on(
        "console",
        lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page = context.new_page()
    page.on("pageerror", lambda error: problems.append(str(error)))
    log_in(page, site, next_url="/evals/")

    page.click(f"a[href='/evals/{second.pk}/']")
    expect(page.locator("#eval-summary")).to_contain_text("0 of 2 passed")
    row = page.locator("#eval-cases tr[data-case=steady]")
    expect(row.locator("[data-field=passed]")).to_have_text("failed")
    expect(row.locator(".check-detail")).to_contain_text("Budget reached")
    team = second.cases.get(case="steady").team
    expect(row.locator(f"a[href='/teams/{team.slug}/']")).to_be_visible()
    page.screenshot(path=SCREENSHOTS / "eval-run.png", full_page=True)

    page.select_option("#compare-form select[name=compare]", str(first.pk))
    page.click("#compare-form button")
    page.wait_for_url(f"{site.url}/evals/{second.pk}/compare/{first.pk}")
    fragile = page.locator("#eval-compare tr[data-case=fragile]")
    expect(fragile.locator("[data-field=verdict]")).to_have_text("failed → passed")
    expect(page.locator("#changed-cases")).to_have_text("Changed verdict: steady, fragile")
    page.screenshot(path=SCREENSHOTS / "eval-compare.png", full_page=True)

    page.goto(f"{site.url}/evals/{second.pk}/")
    page.click(f"a[href='/teams/{team.slug}/']")
    page.wait_for_url(f"{site.url}/teams/{team.slug}/")
    assert problems == []
