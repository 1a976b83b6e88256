"""Replay: a finished demo run, recorded through the fake Messages API, runs again
with no model call at all and matches to the end; a prompt changed by a test-only
hook stops the replay at the first turn it affects, and the report names it."""

import re

import anthropic
import pytest
from django.core.management import call_command

from teams.conversation import pm_requests
from teams.engine import providers, replay
from teams.engine.offline import OfflineProvider
from teams.lib.catalog import OFFLINE_MODEL
from teams.management.commands.loom_demo import DEMO_SLUG
from teams.models import Keeper, Message, PMRequest, Replay, Team, Turn, TurnStep
from teams.run import team_actions
from tests.fakes.messages_api import FakeMessagesAPI, Reply, text, tool
from tests.helpers import drain, per_agent, rows_for_the_module


def offline_behind_the_api(request):
    """The fake Messages API answers as the offline model would: a whole demo run."""
    body = request.body
    reply = OfflineProvider().respond(
        model="loom-offline",
        system=body["system"],
        messages=body["messages"],
        tools=body.get("tools", []),
        max_tokens=body["max_tokens"],
    )
    return Reply(reply.content, stop_reason=reply.stop_reason)


def run_to_the_end(team, limit=400):
    for _ in range(limit):
        request = PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).first()
        if request is not None:
            answer = {
                PMRequest.Kind.APPROVAL: "Approve",
                PMRequest.Kind.BUDGET: "Double",
            }.get(request.kind, "Only the core for now.")
            pm_requests.pm_request_answer(request_id=request.id, answer=answer)
        if not drain(team, limit=1):
            break
    team.refresh_from_db()
    return team


@pytest.fixture(scope="module")
def recorded_run(django_db_setup, django_db_blocker, tmp_path_factory):
    """The demo team run to its end, every model call (its agents' loom-offline) going
    through the real anthropic client to the fake Messages API, which answers as the
    offline model would: every reply recorded. One run for the tests of this module
    that replay it."""
    data_dir = tmp_path_factory.mktemp("replay-data")
    with (
        FakeMessagesAPI(offline_behind_the_api) as api,
        rows_for_the_module(
            django_db_blocker, data_dir, ANTHROPIC_API_KEY="sk-test-key", ANTHROPIC_BASE_URL=api.url
        ) as monkeypatch,
    ):
        monkeypatch.setenv("LOOM_ADMIN_PASSWORD", "correct horse battery")
        client = anthropic.Anthropic(api_key="sk-test-key", base_url=api.url, max_retries=0)
        monkeypatch.setitem(
            providers.PROVIDERS, OFFLINE_MODEL, lambda: providers.AnthropicProvider(client)
        )
        call_command("loom_demo")
        team = Team.objects.get(slug=DEMO_SLUG)
        team.agents.update(model=OFFLINE_MODEL)  # the key would make Claude the default
        team_actions.team_start(team=team)
        team = run_to_the_end(team)
        assert team.status == Team.Status.DONE, team.status
        yield team.pk, api


@pytest.fixture
def recorded(recorded_run, db):
    pk, api = recorded_run
    return Team.objects.get(pk=pk), api


def ids_with_more_digits(team):
    """Rows made and deleted, so the replay's keepers and messages get ids with more
    digits than the original's (as they do on a database many teams share): what the
    agents read must not depend on how long an id is."""
    scratch = Team.objects.create(name="Scratch", slug="scratch")
    Keeper.objects.bulk_create(Keeper(team=scratch, topic="x") for _ in range(1000))
    Message.objects.bulk_create(Message(team=scratch, content="x") for _ in range(1000))
    scratch.delete()


def test_a_replay_of_a_finished_run_matches_to_the_end_with_no_model_call(recorded):
    team, api = recorded
    calls = len(api.requests)
    assert calls > 50  # the original run asked the model for real
    original_turns = Turn.objects.filter(team=team).count()
    assert Keeper.objects.filter(team=team).exists()
    ids_with_more_digits(team)

    row = replay.team_replay(team=team)

    assert len(api.requests) == calls  # the fake Messages API received nothing
    assert row.status == Replay.Status.MATCHED, row.reason + "\n" + row.diff
    assert row.diverged_turn is None and row.diff == ""
    copy = row.team
    copy.refresh_from_db()
    assert copy.status == Team.Status.DONE
    assert Turn.objects.filter(team=copy).count() == original_turns
    assert row.model_steps == TurnStep.objects.filter(turn__team=team, kind="model").count()
    # A replay costs no tokens.
    replayed = Turn.objects.filter(team=copy)
    assert sum(t.total_tokens for t in replayed) == 0
    assert copy.spent_usd == 0
    assert sum(t.total_tokens for t in Turn.objects.filter(team=team)) > 0

    # Loom ran the tools for real: the same conversation, the same files.
    def said(t):  # ids of queries, keepers, consultations, messages are new; all else same
        rows = t.messages.filter(recipient=None).values_list("kind", "content")
        ids = (
            r"q-[0-9a-f]{12}|(?<=[Kk]eeper )\d+|(?<=onsultation )\d+|(?<=onsultations )[\d, ]+|#\d+"
        )
        return [(kind, re.sub(ids, "…", text)) for kind, text in rows]

    assert said(copy) == said(team)
    assert set(copy.workspace_files.values_list("path", "size")) == set(
        team.workspace_files.values_list("path", "size")
    )
    # Each model step of the replay recorded its request's digest, the original's.
    digests = list(
        TurnStep.objects.filter(turn__team=team, kind="model")
        .order_by("turn_id", "index")
        .values_list("request_digest", flat=True)
    )
    assert all(digests)
    assert "0 tokens" in replay.report_text(row) and "Matched" in replay.report_text(row)


def test_a_changed_prompt_stops_the_replay_at_the_first_affected_turn(recorded, monkeypatch):
    team, api = recorded
    calls = len(api.requests)
    # The test-only hook: the reviewer's prompts gain a line (as a code change would).
    marker = "Be extra careful with edge cases."

    def changed(request):
        system = request["system"]
        if "Your name is reviewer" in "".join(b["text"] for b in system):
            system = [*system[:-1], {**system[-1], "text": system[-1]["text"] + "\n" + marker}]
        return {**request, "system": system}

    monkeypatch.setattr(replay, "request_hook", changed)
    row = replay.team_replay(team=team, slug="demo-changed")

    assert len(api.requests) == calls
    first = Turn.objects.filter(team=team, agent__name="reviewer").order_by("id").first()
    assert row.status == Replay.Status.DIVERGED
    assert (row.diverged_turn, row.diverged_agent) == (first.number, "reviewer")
    assert f"turn {first.number} (reviewer)" in row.reason
    assert "+" + marker in row.diff and row.diff.startswith("--- original")
    report = replay.report_text(row)
    assert f"Diverged at turn {first.number} (reviewer)" in report
    # Every turn before it was replayed; the team stopped there, paused.
    before = Turn.objects.filter(team=team, id__lt=first.id).count()
    assert Turn.objects.filter(team=row.team, status=Turn.Status.DONE).count() == before
    row.team.refresh_from_db()
    assert row.team.status == Team.Status.PAUSED


def test_a_replay_stops_at_a_turn_limit_and_the_command_reports_it(recorded, capsys):
    team, _ = recorded
    call_command("team", "replay", team.slug, "--slug", "demo-ten", "--until-turn", "10")
    out = capsys.readouterr().out
    assert "Replay of 'demo' as 'demo-ten': Stopped (turn limit), 10 turns" in out
    copy = Team.objects.get(slug="demo-ten")
    assert copy.turn_count == 10
    assert not Turn.objects.filter(team=copy, number__gt=10).exclude(status="cancelled").exists()
    assert copy.status == Team.Status.PAUSED  # ready to go on, for real, from there


def test_no_worker_runs_a_turn_of_a_team_being_replayed(team, agents):
    """While a replay runs its team, a worker woken for one of its turns leaves it to
    the replay (which answers the model calls from the record)."""
    from teams.engine import loop
    from tests.helpers import make_turn

    copy = Team.objects.create(slug="alpha-replay", name="Alpha (replay)")
    row = Replay.objects.create(source=team, source_slug="alpha", team=copy)
    queued = make_turn(copy.agents.create(name="coach", role="coach"), number=1)
    assert loop.run_turn(queued.id, "a-worker") is None
    queued.refresh_from_db()
    assert queued.status == Turn.Status.QUEUED and queued.attempts == 0
    row.status = Replay.Status.MATCHED
    row.save()
    assert loop.run_turn(queued.id, "a-worker") is not None


# --- MCP calls: answered from the record, the server never contacted --------------


@pytest.fixture
def mcp_recorded(team, mcp_http, messages_api, settings):
    """Alpha's coder calls `fake__echo` of an HTTP MCP server (the fake, counting the
    requests it gets) that asks the PM first; the PM approved it with a note; the call
    ran and the coder read its result. The fake Messages API's record."""
    from teams.integrations import mcp_servers

    settings.LOOM_MCP_TIMEOUT = 8
    mcp_servers.mcp_server_create(
        team=team, name="fake", transport="http", url=mcp_http.url, by_superuser=True
    )
    api = messages_api(
        per_agent(
            {
                "coach": [text("Start.")],
                "researcher": [text("Noted.")],
                "coder": [
                    tool("fake__echo", {"text": "hello"}, "toolu_echo", say="To check it."),
                    text("Echoed."),
                ],
                "reviewer": [text("Fine.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team)
    request = PMRequest.objects.get(team=team, kind=PMRequest.Kind.APPROVAL)
    pm_requests.pm_request_answer(request_id=request.id, answer="Approve", note="Just once.")
    drain(team, limit=2)
    return api


def _echo_step(team):
    return TurnStep.objects.get(turn__team=team, tool_name="fake__echo")


def test_a_replay_answers_an_approved_mcp_call_from_the_record(team, mcp_http, mcp_recorded):
    """Issue 33, finding 8: the PM's recorded Approve is given to the replay's request,
    but the call is answered with the original's result: the server gets 0 requests."""
    recorded = _echo_step(team).content[0]["content"]
    assert recorded == "[The PM approved this call. The PM's note: Just once.]\n\nhello"
    calls, seen = len(mcp_recorded.requests), len(mcp_http.seen_headers)
    assert seen > 0  # the original run listed the tools and called echo

    row = replay.team_replay(team=team, until_turn=3)

    assert len(mcp_http.seen_headers) == seen  # the MCP server received nothing
    assert len(mcp_recorded.requests) == calls
    assert row.status == Replay.Status.STOPPED, row.reason + "\n" + row.diff
    assert _echo_step(row.team).content[0]["content"] == recorded  # the note said once
    approval = PMRequest.objects.get(team=row.team, kind=PMRequest.Kind.APPROVAL)
    assert (approval.status, approval.answer) == (PMRequest.Status.ANSWERED, "Approve")


def test_a_replay_without_an_mcp_calls_recorded_result_stops_there(team, mcp_http, mcp_recorded):
    """No result recorded for the call (its step lost): the replay calls no server, it
    stops at that turn and says why."""
    TurnStep.objects.filter(turn__team=team, tool_name="fake__echo").delete()
    seen = len(mcp_http.seen_headers)

    row = replay.team_replay(team=team)

    assert len(mcp_http.seen_headers) == seen
    assert row.status == Replay.Status.DIVERGED
    assert (row.diverged_turn, row.diverged_agent) == (3, "coder")
    assert row.reason == (
        "turn 3 (coder): the original has no recorded result of fake__echo for this call, "
        "and a replay never calls an MCP server or runs a command itself."
    )
    step = _echo_step(row.team).content[0]  # the replay's call: refused, not run
    assert step["is_error"] and step["content"].endswith("\n\nError: not run: " + row.reason)
    row.team.refresh_from_db()
    assert row.team.status == Team.Status.PAUSED
