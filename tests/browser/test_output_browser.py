"""The team's output in a real browser: a consultation's answers side by side on the
live view, and the workspace from the live view's link to a file's text."""

import uuid
from decimal import Decimal

from django.core.management import call_command
from playwright.sync_api import expect

from teams.files import workspace
from teams.models import ConsultantProfile, Team
from tests.browser.conftest import SCREENSHOTS, log_in
from tests.helpers import make_consultation, make_turn

PLAN = "# Plan\n\n1. The parser <b>first</b>.\n2. The renderer.\n"


def answer(text, point, action):
    return {
        "responder": "offline",
        "timestamp": "2025-01-01T00:00:00+00:00",
        "answer": text,
        "confidence": 0.7,
        "key_points": [point],
        "suggested_actions": [
            {"action": action, "priority": "high", "file": "notes/plan.md", "rationale": "r"}
        ],
        "file_references": [{"path": "notes/plan.md", "lines": None, "relevance": "the plan"}],
    }


def test_consultations_side_by_side_and_the_workspace(
    start_site, browser, pm_user, private_data_dir
):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    coach, coder = team.agents.get(name="coach"), team.agents.get(name="coder")
    turn = make_turn(coder, number=12, phase="implementation")
    workspace.file_write(
        team=team, agent=coder, turn=turn, path="notes/plan.md", content=PLAN, writes_this_turn=0
    )
    batch = uuid.uuid4()
    for name, text, point, action in [
        ("critic", "Mind the empty folder.", "Edge cases first", "Test an empty folder"),
        ("architect", "Keep one entry point.", "Small modules", "Split the renderer"),
    ]:
        make_consultation(
            coach,
            profile=ConsultantProfile.objects.get(name=name),
            batch=batch,
            prompt="A second opinion on our plan?",
            model="loom-offline",
            status="done",
            output=answer(text, point, action),
            cost_usd=Decimal("0"),
            duration_seconds=0.2,
            flagged_files=[{"path": "../secret", "reason": "goes up with '..'"}],
        )

    site = start_site(LOOM_DATA_DIR=str(private_data_dir))
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    problems = []
    context.on(
        "console",
        lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page = context.new_page()
    page.on("pageerror", lambda error: problems.append(str(error)))
    log_in(page, site, next_url="/teams/demo/")

    # One ask, its two consultants side by side: same row, critic left of architect.
    ask = page.locator("#consultations .consult-batch")
    expect(ask).to_have_count(1)
    expect(ask.locator(".consult-ask")).to_contain_text("coach asked: A second opinion")
    critic = ask.locator(".consultant[data-consultant=critic]")
    architect = ask.locator(".consultant[data-consultant=architect]")
    expect(critic.locator(".consult-answer")).to_have_text("Mind the empty folder.")
    expect(architect.locator(".consult-answer")).to_have_text("Keep one entry point.")
    expect(critic.locator(".consult-confidence")).to_have_text("0.70")
    expect(critic.locator(".consult-points")).to_contain_text("Edge cases first")
    expect(architect.locator(".consult-actions")).to_contain_text("Split the renderer")
    expect(critic.locator(".consult-dropped")).to_contain_text("../secret")
    # Both boxes read in one go: the page may still be laying out what arrives live
    # above them (two reads once saw the row 6 px apart).
    left, right = ask.evaluate(
        """batch => ["critic", "architect"].map(name => batch.querySelector(
            `.consultant[data-consultant=${name}]`).getBoundingClientRect().toJSON())"""
    )
    assert abs(left["y"] - right["y"]) < 2 and left["x"] + left["width"] <= right["x"]
    page.locator("#consultations-title").scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / "consultations-live-view.png", full_page=True)

    # The workspace, from the live view: the folder, the file, who wrote it and when.
    link = page.locator("#workspace-link")
    expect(link).to_have_text("Workspace (1 file)")
    link.click()
    expect(page.locator("h1")).to_have_text("Workspace")
    page.locator("tr[data-path=notes] a").click()
    row = page.locator("tr[data-path='notes/plan.md']")
    expect(row.locator(".writer")).to_have_text("coder")
    expect(row.locator(".turn")).to_have_text("turn 12")
    expect(row.locator(".size")).to_have_text(f"{len(PLAN.encode())} bytes")
    page.screenshot(path=SCREENSHOTS / "workspace-folder.png", full_page=True)
    row.locator("a").click()
    expect(page.locator("#file-text")).to_have_text(PLAN.rstrip("\n") + "\n")
    expect(page.locator("#file-text b")).to_have_count(0)  # shown as text, never HTML
    expect(page.locator("#file-facts")).to_contain_text("written last by coder in turn 12")
    page.screenshot(path=SCREENSHOTS / "workspace-file.png", full_page=True)

    # A path that leaves the workspace: refused with the reason.
    response = page.goto(f"{site.url}/teams/demo/files/view/?path=../secret")
    assert response.status == 400
    expect(page.locator("#workspace-refused")).to_contain_text("goes up with '..'")
    assert problems == []
