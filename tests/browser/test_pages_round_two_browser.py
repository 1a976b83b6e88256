"""What a newcomer tripped on (issue 37), in a real browser: "Fork here" sits inside its
own message's card and asks first, saying what the copy holds as the page counts it;
the approval card lays out who, why and the arguments, with Deny as the destructive
choice; the steering controls and "Run again" follow the team's state without a
reload; and the pages fit a 390 px phone with no sideways scroll.

Screenshots go to test-output/screenshots/."""

import re
import time
import uuid
from decimal import Decimal

from django.core.management import call_command
from playwright.sync_api import expect

from teams import services
from teams.models import ConsultantProfile, PMRequest, Team, Turn
from tests.browser.conftest import SCREENSHOTS, log_in
from tests.helpers import make_consultation, make_team

LAPTOP = {"width": 1200, "height": 900}
PHONE = {"width": 390, "height": 844}


def box_inside(inner: dict, outer: dict) -> bool:
    return (
        inner["x"] >= outer["x"] - 0.5
        and inner["y"] >= outer["y"] - 0.5
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 0.5
    )


def opacity(locator) -> float:
    return float(locator.evaluate("node => getComputedStyle(node).opacity"))


def test_fork_here_sits_in_its_message_and_asks_what_the_copy_holds(start_site, browser, pm_user):
    team = make_team("alpha", goal="Write a parser.")
    coach = team.agents.get(name="coach")
    for n in range(1, 6):
        services.message_add(team=team, author=coach, content=f"Line {n} of the plan.")
    site = start_site()
    page = browser.new_context(viewport=LAPTOP).new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    log_in(page, site, next_url="/teams/alpha/")
    expect(page).to_have_title(re.compile(r"^Alpha \(alpha\)"))

    cards = page.locator("#conversation li.msg")
    expect(cards).to_have_count(5)
    third = cards.nth(2)
    expect(third.locator(".msg-n")).to_have_text("#3")
    third.hover()
    button = third.locator(".fork-here")
    expect(button).to_be_visible()
    assert opacity(button) == 1.0
    assert opacity(cards.nth(3).locator(".fork-here")) == 0.0  # the next card's stays quiet
    # Each control's box lies inside its own message's card, never over the next.
    for n in range(5):
        card = cards.nth(n)
        assert box_inside(card.locator(".fork-here").bounding_box(), card.bounding_box()), n
    # The keyboard reaches it too.
    cards.nth(1).locator(".fork-here").focus()
    assert opacity(cards.nth(1).locator(".fork-here")) == 1.0
    page.screenshot(path=SCREENSHOTS / "fork-here.png")

    # It asks first, and Cancel makes nothing.
    button.click()
    dialog = page.locator("#fork-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("h2")).to_have_text("Fork at message 3?")
    expect(dialog.locator("#fork-dialog-what")).to_contain_text(
        "Alpha (fork of message 3), holding this team as it was at message 3: messages 1 to 3 "
        "of this conversation (3 messages)"
    )
    expect(dialog.locator("#fork-dialog-left-out")).to_contain_text("Not copied: model calls")
    page.screenshot(path=SCREENSHOTS / "fork-confirm.png")
    page.click("#fork-cancel")
    expect(dialog).to_be_hidden()
    assert Team.objects.count() == 1

    button.click()
    page.click("#fork-confirm")
    page.wait_for_url(f"{site.url}/teams/alpha-2/")
    expect(page.locator(".flash")).to_contain_text(
        "Forked team 'alpha-2' from 'alpha' at message 3: 3 messages, 0 turns"
    )
    expect(page.locator("h1")).to_contain_text("Alpha (fork of message 3)")
    expect(page.locator("#forked-from")).to_contain_text("at message 3")
    expect(page.locator("#conversation li.msg")).to_have_count(3)
    assert problems == []


def test_the_approval_card_the_end_of_a_run_and_a_phone(start_site, browser, pm_user):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    site = start_site(LOOM_OFFLINE_DELAY="0.05")
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    log_in(page, site, next_url="/teams/demo/")
    inbox = context.new_page()
    inbox.goto(f"{site.url}/pm/")
    expect(page.locator("body[data-live=on]")).to_have_count(1)
    expect(page.locator("#run-again-head")).to_be_visible()  # idle: it may run again
    page.click("button[value=start]")
    expect(page.locator(".flash")).to_be_visible()
    expect(page.locator("#run-again-head")).to_be_hidden()  # running: not now

    # The demo's MCP tool asks the PM first: the card, laid out.
    card = page.locator("#pm-approval")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        request = PMRequest.objects.filter(team=team, status="open").first()
        if request is not None and request.kind == "approval":
            break
        if request is not None:  # the coach's question first
            answer_in_inbox(inbox, request)
        time.sleep(0.3)
    else:
        raise AssertionError("the demo never asked to approve a tool call")
    expect(card).to_be_visible(timeout=20_000)
    expect(page.locator("#pm-question")).to_be_hidden()
    assert request.why, "the agent's reason for the call"
    check_approval_card(card, request)
    card.scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / "approval-card.png")
    # The inbox's card is the same card: built live by its script, then by the server.
    for how in ("live", "rendered"):
        if how == "rendered":
            inbox.reload()
        item = inbox.locator(f'.pm-item[data-id="{request.id}"]')
        expect(item.locator(".approval-title")).to_have_text("An agent asks to call a tool")
        expect(item.locator(".question")).to_have_count(0)  # the card says it, laid out
        check_approval_card(item.locator("form.approval"), request)
        inbox.screenshot(path=SCREENSHOTS / f"inbox-approval-{how}.png", full_page=True)
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    log_in(phone, site, next_url="/pm/")
    check_approval_card(phone.locator(f'.pm-item[data-id="{request.id}"] form.approval'), request)
    assert phone.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    phone.screenshot(path=SCREENSHOTS / "phone-inbox-approval.png", full_page=True)
    phone.context.close()
    note = page.locator("#pm-note")
    note.fill("Fine: keep it short.")
    card.locator('button[value="Approve"]').click()

    # To the end, the page never reloaded: the steering and the banner go by themselves.
    page.evaluate("() => { window.loomSameLoad = true; }")
    expect(page.locator("#roster form.steer").first).to_be_visible()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        team.refresh_from_db()
        if team.status == Team.Status.DONE:
            break
        request = PMRequest.objects.filter(team=team, status="open").first()
        if request is not None:
            answer_in_inbox(inbox, request)
        time.sleep(0.5)
    assert team.status == Team.Status.DONE, team.status
    expect(page.locator("#team-status")).to_have_text("Done", timeout=20_000)
    expect(page.locator("#roster form.steer")).to_have_count(4)
    for form in page.locator("#roster form.steer").all():
        expect(form).to_be_hidden()
    expect(page.locator("#run-again-head")).to_be_hidden()
    expect(page.locator("#end-run-again")).to_be_visible()
    expect(page.locator("#flash")).to_have_count(0)
    assert page.evaluate("() => window.loomSameLoad") is True

    # A phone: no page scrolls sideways.
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    log_in(phone, site, next_url="/")
    turn = Turn.objects.filter(team=team, status="done").order_by("id").last()
    for name, path in (
        ("team-list", "/"),
        ("live", "/teams/demo/"),
        ("inbox", "/pm/"),
        ("turn", f"/admin/teams/turn/{turn.pk}/change/"),
    ):
        phone.goto(f"{site.url}{path}")
        if name == "turn":  # what the model read, open: long lines wrap
            phone.locator("details.model-read").first.evaluate("node => { node.open = true; }")
        wide = phone.evaluate("() => document.documentElement.scrollWidth")
        phone.screenshot(path=SCREENSHOTS / f"phone-{name}.png", full_page=True)
        assert wide <= PHONE["width"], f"{path} is {wide} px wide on a 390 px phone"
    assert problems == []


def check_approval_card(card, request: PMRequest) -> None:
    """An approval card, on the live view or in the inbox: who calls what, why, each
    argument in a monospace block, a note field across the card, Deny in red."""
    expect(card).to_be_visible(timeout=20_000)
    expect(card.locator(".approval-call")).to_have_text(
        f"{request.agent.name} wants to call {request.tool_name}"
    )
    expect(card.locator(".approval-why")).to_have_text(request.why)
    argument = card.locator(".approval-args pre").first
    expect(argument).to_be_visible()
    assert "monospace" in argument.evaluate("node => getComputedStyle(node).fontFamily")
    assert "\\n" not in argument.inner_text()  # texts' lines as lines, never escaped
    note = card.locator("textarea[name=note]")
    label_for = card.locator("label.note").get_attribute("for")
    assert note.get_attribute("id") == label_for  # the label names its field
    assert note.bounding_box()["width"] > 0.8 * card.bounding_box()["width"]
    deny, approve = card.locator('button[value="Deny"]'), card.locator('button[value="Approve"]')
    deny_color = deny.evaluate("node => getComputedStyle(node).backgroundColor")
    approve_color = approve.evaluate("node => getComputedStyle(node).backgroundColor")
    assert deny_color == "rgb(180, 35, 24)" and approve_color != deny_color
    expect(card.locator("details textarea[name=arguments]")).to_be_hidden()  # until opened


def answer_in_inbox(inbox, request: PMRequest) -> None:
    """Answer in the inbox tab, so the watched page is never reloaded."""
    item = inbox.locator(f'.pm-item[data-id="{request.id}"]')
    expect(item).to_be_visible(timeout=20_000)
    if request.kind in ("approval", "stuck", "budget"):
        item.locator("button[name=answer]").first.click()
    else:
        item.locator('textarea[name="answer"]').fill("Only the core for now.")
        item.locator("button", has_text="Answer and resume").click()
    expect(inbox.locator(f'.pm-item[data-id="{request.id}"]')).to_have_count(0)


# A long ask (its words end past the panel's 300 characters) and an answer with a path
# too long for a phone's line.
LONG_ASK = "What is the riskiest part of the plan, and what would you start with? " * 6
LONG_ANSWER = (
    "Start with the parser: src/markdown_notes/parsing/front_matter_and_wiki_links.py "
    "holds the riskiest logic."
)


def inside_its_card(page, selector: str, card: str) -> list[str]:
    """The texts of `selector` that stick out of their `card` or are clipped in it."""
    return page.locator(selector).evaluate_all(
        """(nodes, card) => nodes.filter((node) => {
            const box = node.getBoundingClientRect();
            const outer = node.closest(card).getBoundingClientRect();
            return node.scrollWidth > node.clientWidth + 1 || box.right > outer.right + 0.5
                || box.left < outer.left - 0.5;
        }).map((node) => node.textContent.slice(0, 40))""",
        card,
    )


ROSTER_PLACES = """() => {
    const roster = document.getElementById("roster").getBoundingClientRect();
    const at = (node) => {
        const box = node.getBoundingClientRect();
        return [Math.round(box.x - roster.x), Math.round(box.y - roster.y)];
    };
    const coder = document.querySelector("#roster li[data-agent=coder]");
    return {
        names: [...document.querySelectorAll("#roster li")].slice(0, 3)
            .map((li) => at(li.querySelector(".agent-name"))),
        speak: at(coder.querySelector(".steer-next")),
        seat: at(coder.querySelector(".steer-seat summary")),
    };
}"""


def roster_places(page) -> dict:
    """Where the first three agents' names and the coder's other buttons sit in the
    roster (the coder is third in the demo's rotation)."""
    return page.evaluate(ROSTER_PLACES)


def test_consultation_text_and_the_nudge_row_on_a_laptop_and_a_phone(start_site, browser, pm_user):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    batch = uuid.uuid4()
    for name in ("critic", "architect"):
        make_consultation(
            team.agents.get(name="coach"),
            profile=ConsultantProfile.objects.get(name=name),
            batch=batch,
            prompt=LONG_ASK,
            model="loom-offline",
            status="done",
            output={
                "responder": "offline",
                "timestamp": "2025-01-01T00:00:00+00:00",
                "answer": LONG_ANSWER,
                "confidence": 0.6,
                "key_points": [],
                "suggested_actions": [],
                "file_references": [],
            },
            cost_usd=Decimal("0"),
        )
    site = start_site()
    for width, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
        page = browser.new_context(viewport=viewport, is_mobile=width == "phone").new_page()
        log_in(page, site, next_url="/teams/demo/")

        # The ask is cut after a whole word, the whole of it on hover; nothing is clipped.
        prompt = page.locator(".consult-prompt")
        shown = prompt.inner_text()
        assert shown.endswith("…") and len(shown) <= 300
        assert LONG_ASK.startswith(shown[:-1]) and LONG_ASK[len(shown) - 1] == " "
        assert prompt.get_attribute("title") == LONG_ASK
        expect(page.locator(".consult-answer").first).to_have_text(LONG_ANSWER)
        assert inside_its_card(page, ".consult-prompt", ".consult-batch") == []
        assert inside_its_card(page, ".consult-answer", ".consultant") == []
        page.locator("#consultations-title").scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOTS / f"consultation-text-{width}.png")

        # Opening "Nudge…" puts its box on a line of its own under the coder's buttons;
        # the coder's other buttons and the agents before it keep their places.
        coder = page.locator("#roster li[data-agent=coder]")
        coder.scroll_into_view_if_needed()
        before = roster_places(page)
        nudge = coder.locator("details.steer-nudge")
        nudge.locator("summary").click()
        box = nudge.locator("textarea")
        expect(box).to_be_visible()
        assert roster_places(page) == before
        buttons = [coder.locator(s).bounding_box() for s in (".steer-next", ".steer-seat summary")]
        opened = box.bounding_box()
        assert opened["y"] >= max(b["y"] + b["height"] for b in buttons)
        assert opened["x"] + opened["width"] <= viewport["width"]
        assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport["width"]
        coder.scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOTS / f"nudge-row-{width}.png")
        page.context.close()
