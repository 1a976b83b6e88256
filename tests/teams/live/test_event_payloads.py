"""The rows as payloads: what a live event carries is what the API answers."""

from teams.live.event_payloads import MessageOut, TeamStatusOut
from teams.models import Message


def test_a_team_status_says_what_a_pm_may_do_now(team):
    status = TeamStatusOut.of(team)
    assert (status.team, status.status, status.actions) == ("alpha", "idle", ["start"])
    assert status.spent_usd == "0.0000" and status.max_turns == team.max_turns


def test_a_message_names_its_recipient(team, agents):
    message = Message.objects.create(
        team=team, author=agents["coach"], recipient=agents["coder"], content="Hi", kind="chat"
    )
    out = MessageOut.of(message)
    assert (out.speaker, out.recipient, out.content) == ("coach", "coder", "Hi")
