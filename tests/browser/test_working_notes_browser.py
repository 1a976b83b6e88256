"""An agent's working notes in a real browser (issue 35): the text it writes beside a
tool call streams live in the "is speaking" box, and once the turn is done it sits,
collapsed, under the turn's message as "Working notes", never in the message; after
a reload the page renders the same from the stored steps. Text, never HTML.

Screenshots go to test-output/screenshots/."""

from django.core.management import call_command
from playwright.sync_api import expect

from teams.models import Message, Team
from tests.browser.conftest import SCREENSHOTS, log_in
from tests.fakes.messages_api import FakeMessagesAPI, text, tool
from tests.helpers import per_agent

XSS_IMG = "<img src=x onerror=\"alert('xss-notes')\">"
NOTE = f"Let me look at the plan first. {XSS_IMG}"
FINAL = "The plan holds: parser first, then the renderer."
PASS_NOTE = "Nothing to build before the spec is settled."


def notes_of(message):
    return message.locator("details.working-notes")


def check_the_notes(page) -> None:
    """Both turns' notes as the page shows them, live or rendered: collapsed, under
    their message, and not in it."""
    coach = page.locator("#conversation li.msg", has_text=FINAL)
    expect(coach.locator(".content")).to_have_text(FINAL)
    notes = notes_of(coach)
    expect(notes).to_have_count(1)
    expect(notes.locator("summary")).to_have_text("Working notes")
    expect(notes.locator(".notes-text")).to_be_hidden()  # collapsed by default
    expect(notes.locator(".notes-text")).to_have_text(NOTE, use_inner_text=False)
    # The coder passed with a note beside the call: the note is under its pass note.
    passed = page.locator("#conversation li.kind-pass_note")
    expect(passed.locator(".content")).to_have_text("(coder passes: no spec yet)")
    expect(notes_of(passed).locator(".notes-text")).to_have_text(PASS_NOTE, use_inner_text=False)
    # One note box each, and the text never became an element.
    expect(page.locator("#conversation details.working-notes")).to_have_count(2)
    expect(page.locator("img[src=x]")).to_have_count(0)


def test_working_notes_live_and_after_a_reload(start_site, browser, pm_user):
    script = {
        # Both calls wait: the page reloads after Start, then sees the turn run.
        "coach": [
            tool("scan_hierarchy", {}, say=NOTE, delay=3),
            text(FINAL, delay=2.5),
            tool("ask_pm", {"question": "Shall they go on?"}),
        ],
        "researcher": [text("Noted.")],
        "coder": [tool("pass_turn", {"reason": "no spec yet"}, say=PASS_NOTE)],
        "reviewer": [text("Fine.")],
    }
    call_command("loom_demo")
    with FakeMessagesAPI(per_agent(script)) as api:
        site = start_site(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=api.url)
        page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
        problems, dialogs = [], []
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        log_in(page, site, next_url="/teams/demo/")
        expect(page.locator("body[data-live=on]")).to_have_count(1)
        page.click("button[value=start]")
        expect(page.locator(".flash")).to_be_visible()  # the page after Start
        expect(page.locator("body[data-live=on]")).to_have_count(1)
        page.evaluate("() => { window.loomSameLoad = true; }")  # no reload until we reload

        # Live: the note streams in while the turn runs, before any message.
        expect(page.locator("#speaking-text")).to_have_text(NOTE, timeout=30_000)
        expect(page.locator("#conversation li.msg")).to_have_count(0)
        page.locator("#speaking").scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOTS / "working-notes-streaming.png")
        # The turn done: its message is the final reply only, the note below it.
        expect(page.locator("#pm-request")).to_be_visible(timeout=30_000)
        check_the_notes(page)
        coach = page.locator("#conversation li.msg", has_text=FINAL)
        notes_of(coach).locator("summary").click()
        expect(notes_of(coach).locator(".notes-text")).to_be_visible()
        coach.scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOTS / "working-notes-live.png")
        assert page.evaluate("() => window.loomSameLoad") is True

        # After a reload: the same, from the stored steps.
        page.reload()
        expect(page.locator("body[data-live=on]")).to_have_count(1)
        check_the_notes(page)
        notes_of(page.locator("#conversation li.kind-pass_note")).locator("summary").click()
        page.screenshot(path=SCREENSHOTS / "working-notes-reloaded.png")
        team = Team.objects.get(slug="demo")
        assert not Message.objects.filter(team=team, content__contains=NOTE).exists()
        assert problems == [] and dialogs == []
