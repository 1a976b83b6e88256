"""Approval requests on the PM's pages: the inbox and the live view show who wants to
call what, with which arguments, and take Approve / Always approve / Deny, a note and
edited arguments."""

import json

from django.urls import reverse

from teams.models import Message, PMRequest, Turn
from tests.helpers import PEER_CALL, client_for, drain, stop_at_approval


def _answer(client, request, **data):
    return client.post(reverse("pm-answer", args=[request.id]), data, follow=True)


def test_the_inbox_shows_the_call_and_its_choices(team, pm, messages_api):
    stop_at_approval(team, messages_api)
    page = client_for(pm).get(reverse("pm-inbox")).content.decode()
    # The card as the live view lays it out: who calls what, why, each argument in a block.
    assert (
        '<strong class="approval-agent">coder</strong> wants to call '
        '<code class="approval-tool">peer_message</code>'
    ) in page
    assert '<blockquote class="approval-why">' in page
    assert "<dt>to</dt><dd><pre>reviewer</pre></dd>" in page
    assert '<textarea id="pm-note-' in page and 'name="note"' in page
    assert 'class="choice-deny"' in page
    assert "Approve with edited arguments" in page
    for choice in ("Approve", "Always approve", "Deny"):
        assert f'value="{choice}"' in page
    assert "&quot;to&quot;: &quot;reviewer&quot;" in page  # the arguments, escaped, editable


def test_the_live_view_offers_the_approval_form(team, pm, messages_api):
    stop_at_approval(team, messages_api)
    page = client_for(pm).get(reverse("team-live", args=[team.slug])).content.decode()
    assert "An agent asks to call a tool" in page
    approval = page[page.index('id="pm-approval"') :]
    assert "hidden" not in approval[: approval.index(">")]
    assert 'value="Deny" formnovalidate' in approval


def test_deny_with_a_note_from_the_page(team, pm, messages_api):
    api = stop_at_approval(team, messages_api)
    request = PMRequest.objects.get(team=team)
    unchanged = json.dumps(PEER_CALL, indent=2)  # the box as the page filled it
    response = _answer(client_for(pm), request, answer="Deny", note="Not now.", arguments=unchanged)
    assert "Answer sent" in response.content.decode()
    request.refresh_from_db()
    assert (request.answer, request.note, request.approved_arguments) == ("Deny", "Not now.", None)
    drain(team, limit=3)
    result = [r for r in api.requests if r.agent == "coder"][1].body["messages"][-1]["content"][0]
    assert result["content"].startswith(
        'Error: the PM denied this call (the PM\'s reason: "Not now."). It did not run.'
    )


def test_edited_arguments_from_the_page(team, pm, messages_api):
    stop_at_approval(team, messages_api)
    request = PMRequest.objects.get(team=team)
    edited = json.dumps({"to": "researcher", "content": "look"})
    _answer(client_for(pm), request, answer="Approve", arguments=edited)
    drain(team, limit=3)
    assert Message.objects.get(kind=Message.Kind.PEER).recipient.name == "researcher"


def test_edited_arguments_that_are_not_json_or_break_the_schema_change_nothing(
    team, pm, messages_api
):
    stop_at_approval(team, messages_api)
    request = PMRequest.objects.get(team=team)
    client = client_for(pm)
    broken = _answer(client, request, answer="Approve", arguments="{not json").content.decode()
    assert "The edited arguments are not JSON" in broken
    unfit = _answer(client, request, answer="Approve", arguments='{"to": "reviewer"}')
    assert "do not fit peer_message" in unfit.content.decode()
    request.refresh_from_db()
    assert request.status == PMRequest.Status.OPEN
    assert Turn.objects.get(pk=request.turn_id).status == Turn.Status.WAITING
