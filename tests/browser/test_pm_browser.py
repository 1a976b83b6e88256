"""The PM's day in a real browser: start a team, watch it talk, answer the coach."""

import re

from django.core.management import call_command
from playwright.sync_api import expect

from teams import services
from teams.conversation import pm_requests
from teams.models import Message, PMRequest, Team, Turn
from tests.browser.conftest import SCREENSHOTS, log_in
from tests.fakes.messages_api import FakeMessagesAPI, text, tool
from tests.helpers import key_in, make_turn, per_agent

XSS_SCRIPT = '<script>alert("xss-script")</script>'
XSS_IMG = "<img src=x onerror=\"alert('xss-img')\">"


def test_pm_starts_demo_watches_and_answers_from_the_inbox(start_site, browser, pm_user):
    call_command("loom_demo")
    site = start_site()
    context = browser.new_context()
    # The pages keep to their Content-Security-Policy: the browser reports no violation.
    violations = []
    context.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    live = context.new_page()
    log_in(live, site, next_url="/teams/demo/")
    inbox = context.new_page()
    inbox.goto(f"{site.url}/pm/")
    expect(inbox.locator("#inbox-empty")).to_be_visible()
    expect(inbox.locator("body[data-live=on]")).to_have_count(1)
    expect(live.locator("body[data-live=on]")).to_have_count(1)

    expect(live.locator("button[value=pause]")).to_be_disabled()
    live.click("button[value=start]")
    expect(live.locator("#team-status")).to_have_text(re.compile("Running|Awaiting PM"))
    expect(live.locator("button[value=start]")).to_be_disabled()
    # Text streams into the speaking box before it becomes a message.
    # (Locators, not wait_for_function: the page's CSP forbids the eval it needs.)
    expect(live.locator("#speaking-text")).to_have_text(re.compile(r"\S"), timeout=20_000)
    expect(live.locator("#conversation li.msg").nth(1)).to_be_visible(timeout=20_000)
    expect(live.locator("#conversation li.kind-pass_note").first).to_be_visible(timeout=20_000)

    # The coach's question appears in the open inbox without a reload.
    item = inbox.locator(".pm-item")
    expect(item).to_have_count(1, timeout=30_000)
    expect(item.locator(".question")).to_contain_text("What should the first version of")
    expect(live.locator("#pm-request")).to_be_visible()
    expect(live.locator("#team-status")).to_have_text("Awaiting PM")
    live.screenshot(path=SCREENSHOTS / "live-view.png", full_page=True)
    inbox.screenshot(path=SCREENSHOTS / "inbox.png", full_page=True)
    messages_before = live.locator("#conversation li.msg").count()

    item.locator("textarea").fill("HTML only for now.")
    item.locator("button").click()
    expect(inbox.locator(".flash")).to_contain_text("Answer sent; team demo resumes.")
    expect(inbox.locator(".pm-item")).to_have_count(0)

    # The live view shows the answer, the team running again and new messages.
    expect(live.locator("#conversation li.kind-pm .content")).to_have_text("HTML only for now.")
    expect(live.locator("#pm-request")).to_be_hidden()
    expect(live.locator("#conversation li.msg").nth(messages_before + 1)).to_be_attached(
        timeout=20_000
    )
    live.locator("button[value=pause]").dispatch_event("click")  # the page keeps scrolling
    expect(live.locator(".flash")).to_contain_text("Team 'demo' paused.")
    live.goto(f"{site.url}/admin/teams/agent/")  # the admin too
    assert violations == []
    team = Team.objects.get(slug="demo")
    assert PMRequest.objects.get(team=team).status == "answered"
    assert Message.objects.filter(team=team, kind="pm").count() == 1


def test_agent_output_is_text_everywhere(start_site, browser, pm_user):
    payload = f"Look: {XSS_SCRIPT} {XSS_IMG} done"
    with FakeMessagesAPI(
        per_agent(
            {
                "coach": [text(payload), tool("ask_pm", {"question": f"Approve {XSS_IMG}?"})],
                "researcher": [text(f"{XSS_IMG} from research")],
                "coder": [tool("pass_turn", {"reason": XSS_SCRIPT})],
                "reviewer": [text("Fine.")],
            }
        )
    ) as api:
        call_command("loom_demo")
        site = start_site(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=api.url)
        context = browser.new_context()
        page = context.new_page()
        dialogs = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        log_in(page, site, next_url="/teams/demo/")
        inbox = context.new_page()
        inbox.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        inbox.goto(f"{site.url}/pm/")
        expect(inbox.locator("body[data-live=on]")).to_have_count(1)
        page.click("button[value=start]")

        # Live (WebSocket) rendering.
        expect(page.locator("#conversation li.msg").first.locator(".content")).to_have_text(
            payload, timeout=20_000
        )
        expect(page.locator("#pm-question")).to_have_text(f"Approve {XSS_IMG}?", timeout=20_000)
        expect(inbox.locator(".pm-item .question")).to_have_text(f"Approve {XSS_IMG}?")
        expect(page.locator(".kind-pass_note .content")).to_have_text(
            f"(coder passes: {XSS_SCRIPT})"
        )
        # A PM message goes through the same path.
        page.fill("form.post textarea", f"PM says {XSS_SCRIPT}")
        page.click("form.post button")
        expect(page.locator("#conversation li.kind-pm .content")).to_have_text(
            f"PM says {XSS_SCRIPT}"
        )

        pages = [page, inbox]
        for url in [
            "/teams/demo/",
            "/pm/",
            "/admin/teams/message/",
            f"/admin/teams/message/{Message.objects.filter(kind='chat').first().pk}/change/",
            "/admin/teams/pmrequest/",
            "/admin/teams/turnstep/",
            f"/admin/teams/agent/{Team.objects.get(slug='demo').agents.get(name='coach').pk}/change/",
        ]:
            page.goto(site.url + url)
            pages.append(page)
            assert "xss" not in " ".join(dialogs)
            # The payloads never became elements: no such script, no such image.
            injected = page.evaluate(
                "[...document.scripts].filter(s => s.type !== 'application/json'"
                " && s.textContent.includes('xss')).length"
                " + document.querySelectorAll('img[src=x]').length"
            )
            assert injected == 0, url
            body = page.locator("body").inner_text()
            assert "xss-img" in body or "xss-script" in body, url
        assert dialogs == []
        assert len(api.requests) >= 5


def test_two_pms_answer_the_same_request(start_site, browser, pm_user):
    call_command("loom_demo")
    team = Team.objects.get(slug="demo")
    Team.objects.filter(pk=team.pk).update(status=Team.Status.AWAITING_PM, turn_count=5)
    make_turn(team.agents.get(name="coach"), status="done", number=5, outcome="pm_request")
    request = pm_requests.pm_request_open(
        team=team, question="Ship on Friday?", agent=team.agents.get(name="coach")
    )
    site = start_site()
    first, second = browser.new_context(), browser.new_context()
    pages = []
    for context in (first, second):
        page = context.new_page()
        log_in(page, site, next_url="/pm/")
        expect(page.locator(f".pm-item[data-id='{request.id}']")).to_be_visible()
        page.locator(".pm-item textarea").fill(f"Answer from context {len(pages) + 1}")
        pages.append(page)

    pages[0].locator(".pm-item button").click()
    expect(pages[0].locator(".flash")).to_contain_text("Answer sent; team demo resumes.")
    # The second tab's item disappears live, but a PM who already clicked gets told.
    expect(pages[1].locator(".pm-item")).to_have_count(0)
    pages[1].goto(f"{site.url}/pm/")
    pages[1].evaluate(
        """([url, token]) => {
            const form = document.createElement('form');
            form.method = 'post'; form.action = url;
            form.innerHTML = '<input type=hidden name=csrfmiddlewaretoken>' +
                             '<textarea name=answer>Answer from context 2</textarea>';
            form.querySelector('input').value = token;
            document.body.append(form); form.submit();
        }""",
        [
            f"/pm/{request.id}/answer/",
            pages[1].evaluate(
                "JSON.parse(document.getElementById('inbox-config').textContent).csrf"
            ),
        ],
    )
    expect(pages[1].locator(".flash-error")).to_contain_text(
        "This PM request was already answered."
    )

    request.refresh_from_db()
    assert request.answer == "Answer from context 1"
    assert Message.objects.filter(team=team, kind="pm").count() == 1
    team.refresh_from_db()
    assert team.status in (Team.Status.RUNNING, Team.Status.AWAITING_PM)
    resumed = Turn.objects.filter(team=team, number__gt=5, purpose="conversation")
    assert resumed.filter(number=6).count() == 1


def test_pages_catch_up_on_what_happened_before_their_websocket_connected(
    start_site, browser, pm_user
):
    """The page is rendered, then the team moves on before the WebSocket is up
    (a slow network, a reconnect): nothing said in between is missing."""
    call_command("loom_demo")
    site = start_site()
    context = browser.new_context()
    held = []
    context.route_web_socket(re.compile(r".*/ws/.*"), lambda ws: held.append(ws))
    live = context.new_page()
    log_in(live, site, next_url="/teams/demo/")
    inbox = context.new_page()
    inbox.goto(f"{site.url}/pm/")
    expect(live.locator("#no-messages")).to_be_visible()
    expect(inbox.locator("#inbox-empty")).to_be_visible()

    team = Team.objects.get(slug="demo")
    coach = team.agents.get(name="coach")
    services.message_add(team=team, author=coach, content="Said while you were away.")
    Team.objects.filter(pk=team.pk).update(status=Team.Status.RUNNING)
    PMRequest.objects.create(team=team, agent=coach, question="Missed question?")

    for ws in held:  # the sockets reach the server only now
        ws.connect_to_server()
    expect(live.locator("#conversation li.msg .content")).to_have_text(
        ["Said while you were away."]
    )
    expect(live.locator("#pm-question")).to_have_text("Missed question?")
    expect(live.locator("#team-status")).to_have_text("Running")
    # The buttons follow the status the socket reports, without a reload.
    expect(live.locator("button[value=start]")).to_be_disabled()
    expect(live.locator("button[value=pause]")).to_be_enabled()
    expect(inbox.locator(".pm-item .question")).to_have_text(["Missed question?"])
    context.close()


def test_live_pages_say_when_the_connection_drops_and_when_access_is_refused(
    start_site, browser, pm_user
):
    call_command("loom_demo")
    site = start_site()
    context = browser.new_context()
    routes = []

    def through(ws):
        ws.connect_to_server()
        routes.append(ws)

    context.route_web_socket(re.compile(r".*/ws/.*"), through)
    page = context.new_page()
    log_in(page, site, next_url="/teams/demo/")
    expect(page.locator("body[data-live=on]")).to_have_count(1)
    notice = page.locator("#live-notice")
    expect(notice).to_be_hidden()

    routes[-1].close(code=4000, reason="dropped")  # a network drop, say
    expect(notice).to_have_text("Connection lost; reconnecting…")
    expect(page.locator("body[data-live=on]")).to_have_count(1, timeout=10_000)
    expect(notice).to_be_hidden()
    assert len(routes) == 2

    routes[-1].close(code=4403, reason="refused")  # what the server sends
    expect(notice).to_contain_text("you may no longer see this")
    expect(page.locator("body[data-live=refused]")).to_have_count(1)
    page.wait_for_timeout(2500)
    assert len(routes) == 2, "a refused page must not keep reconnecting"
    context.close()


def test_questions_between_agents_show_live_as_compact_lines(start_site, browser, pm_user):
    question = f"Which parser? {XSS_IMG}"
    with FakeMessagesAPI(
        per_agent(
            {
                "coach": [
                    tool("peer_ask_question", {"question": question, "target": "researcher"}),
                    text("Asked."),
                    *[text("Thanks.")] * 5,
                ],
                "researcher": [
                    lambda r: tool(
                        "peer_answer_question", {"query_id": key_in(r), "answer": "A strict one."}
                    ),
                    text("Answered."),
                    *[text("Noted.")] * 5,
                ],
                "coder": [text("Fine.")] * 5,
                "reviewer": [text("Fine.")] * 5,
            }
        )
    ) as api:
        call_command("loom_demo")
        site = start_site(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=api.url)
        page = browser.new_page()
        log_in(page, site, next_url="/teams/demo/")
        expect(page.locator("#no-queries")).to_have_text("No questions yet.")
        expect(page.locator("body[data-live=on]")).to_have_count(1)
        page.click("button[value=start]")
        entry = page.locator("#queries li.query")
        expect(entry.locator(".hops li")).to_have_text(
            ["coach asked researcher", "researcher answered"], timeout=20_000
        )
        expect(entry.locator(".question")).to_have_text(question)
        expect(entry).to_have_class(re.compile("status-answered"))
        assert page.locator("#queries img[src=x]").count() == 0
        page.screenshot(path=str(SCREENSHOTS / "live-view-questions.png"), full_page=True)
        # The socket stayed open through the query events: later messages still arrive.
        # (At least two: the team keeps talking while the page is looked at.)
        fine = page.locator("#conversation li.msg .content", has_text="Fine.")
        expect(fine.nth(1)).to_be_attached(timeout=20_000)
        assert page.evaluate("document.body.dataset.live") == "on"
        page.reload()  # and the server renders the same lines
        expect(page.locator("#queries li.query .hops li")).to_have_text(
            ["coach asked researcher", "researcher answered"]
        )
