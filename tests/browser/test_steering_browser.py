"""Steering in a real browser: the PM picks the next speaker from the roster and that
agent speaks next; a nudge is shown in the conversation as the PM's note to one agent
and reaches that agent's next request only; a seat taken shows as the PM's."""

import json
import re

from django.core.management import call_command
from playwright.sync_api import expect

from teams.history.model_requests import turn_requests
from teams.models import Message, Team, Turn
from tests.browser.conftest import SCREENSHOTS, log_in

NUDGE = "Keep the notes to one page, please."
SEAT = "Plan: one Markdown file, notes.md, with a heading per topic."


def conversation_turns(team) -> list[Turn]:
    return list(
        Turn.objects.filter(team=team, purpose=Turn.Purpose.CONVERSATION)
        .exclude(status=Turn.Status.CANCELLED)
        .select_related("agent")
        .order_by("id")
    )


def test_next_speaker_nudge_and_seat_from_the_roster(start_site, browser, pm_user):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    site = start_site(LOOM_OFFLINE_DELAY="0.3")
    page = browser.new_context(viewport={"width": 1200, "height": 950}).new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    log_in(page, site, next_url="/teams/demo/")
    expect(page.locator("body[data-live=on]")).to_have_count(1)
    roster = page.locator("#roster")

    # The PM picks the reviewer, who is not first in the rotation, then starts.
    roster.locator("li[data-agent=reviewer] button.steer-next").click()
    expect(page.locator(".flash")).to_contain_text("reviewer speaks next")
    expect(roster.locator("li[data-agent=reviewer] .next-speaker")).to_have_text("speaks next")
    page.screenshot(path=SCREENSHOTS / "steer-next-speaker.png", full_page=True)

    # A private nudge for the coder, before anyone speaks.
    nudge = roster.locator("li[data-agent=coder] details.steer-nudge")
    nudge.locator("summary").click()
    nudge.locator("textarea").fill(NUDGE)
    nudge.locator("button[value=nudge]").click()
    expect(page.locator(".flash")).to_contain_text("Nudge sent: coder reads it on its next turn")
    shown = page.locator("#conversation li.kind-nudge")
    expect(shown.locator(".speaker")).to_contain_text("→ coder")
    expect(shown.locator(".content")).to_have_text(NUDGE)
    page.screenshot(path=SCREENSHOTS / "steer-nudge.png", full_page=True)

    page.click("button[value=start]")
    expect(page.locator("#speaking-agent")).to_have_text("reviewer", timeout=20_000)
    # The reviewer speaks first, then the rotation resumes after it: coach, researcher,
    # coder.
    expect(page.locator("#conversation li.msg[data-turn]").nth(3)).to_be_attached(timeout=60_000)
    page.locator("button[value=pause]").dispatch_event("click")
    expect(page.locator(".flash")).to_contain_text("Team 'demo' paused.")
    expect(page.locator("#team-status")).to_have_text("Paused")
    spoke = [t.agent.name for t in conversation_turns(team)]
    assert spoke[:4] == ["reviewer", "coach", "researcher", "coder"], spoke
    expect(roster.locator(".next-speaker")).to_have_count(0)

    # The nudge reached the coder's next request, and nobody else's.
    def requests_of(name):
        return [
            json.dumps(request)
            for turn in conversation_turns(team)
            if turn.agent.name == name and turn.status == Turn.Status.DONE
            for request in turn_requests(turn)
        ]

    assert any(NUDGE in r for r in requests_of("coder")[:1])
    for name in ("reviewer", "coach", "researcher"):
        assert not any(NUDGE in r for r in requests_of(name)), name

    # The PM takes the coder's seat: its turn, shown as written by the PM.
    seat = roster.locator("li[data-agent=coder] details.steer-seat")
    seat.locator("summary").click()
    seat.locator("textarea").fill(SEAT)
    seat.locator("button[value=seat]").click()
    expect(page.locator(".flash")).to_contain_text("Posted as coder's turn, marked as yours")
    taken = page.locator("#conversation li.kind-seat").last
    expect(taken.locator(".speaker")).to_have_text("coder (written by the PM)")
    expect(taken.locator(".content")).to_have_text(SEAT)
    message = Message.objects.get(team=team, kind=Message.Kind.SEAT)
    assert message.author.name == "coder" and message.author_label == "pm (pm)"
    page.screenshot(path=SCREENSHOTS / "steer-seat.png", full_page=True)

    # A done team offers no steering.
    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE)
    page.reload()
    expect(roster.locator("form.steer")).to_have_count(0)
    assert not [p for p in problems if re.search(r"\S", p)], problems
