"""A turn's claim reads what its request is built from besides the history (the previous
snapshot, the roster, stamps of the anchors, MCP servers and consultants), and a worker
keeps the anchors block and the tools it built under those stamps. What it keeps is an
optimisation: a change made anywhere between two turns (a service, a raw UPDATE, another
worker) is in the next request, which equals, byte for byte, the one a worker that kept
nothing builds."""

import json
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from teams import services
from teams.engine import claims, history_kept, history_rows, loop, prompts, system_text
from teams.integrations import mcp_servers
from teams.models import Agent, Anchor, ConsultantProfile, McpServer, Team, Turn
from teams.run import team_actions, turns
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, make_mcp_server, per_agent

ECHO = {"name": "echo", "description": "Echo the text.", "input_schema": {"type": "object"}}


@pytest.fixture(autouse=True)
def nothing_kept():
    history_kept.forget()
    yield
    history_kept.forget()


def _claim(team: Team, agent: Agent) -> Turn:
    """A turn of `agent`, queued and claimed now as a worker claims it (its last one
    done)."""
    Turn.objects.filter(agent=agent, status=Turn.Status.RUNNING).update(status=Turn.Status.DONE)
    number = Turn.objects.filter(team=team).count() + 1
    queued = turns.turn_enqueue(team=Team.objects.get(pk=team.pk), agent=agent, number=number)
    return turns.turn_claim(queued.id, "test-worker", annotate=claims.claim_annotations)


def _request(turn: Turn, claimed) -> str:
    prompt = prompts.build(
        turn.agent, turn.team, until_id=turn.snapshot_message_id, phase=turn.phase, claimed=claimed
    )
    _, definitions = loop._turn_tools(turn.agent, turn.team, claimed, prompt.snapshot)
    return json.dumps(
        {
            "system": prompt.system,
            "blocks": prompt.blocks,
            "messages": prompt.messages,
            "tools": definitions,
        },
        ensure_ascii=False,
    )


def _sent(team: Team, agent: Agent) -> str:
    """The request of a turn of `agent` claimed now, as its worker builds it (with what
    it kept from earlier turns); asserted equal to a cold build's (no claim's reads,
    nothing kept, as a worker that kept nothing reads it)."""
    turn = _claim(team, agent)
    with mock.patch.object(history_kept, "KEEP_HISTORY", False):
        cold = _request(turn, None)
    warm = _request(turn, claims.claimed(turn))
    assert warm == cold
    return warm


def _tool_names(request: str) -> list[str]:
    return [t["name"] for t in json.loads(request)["tools"]]


def test_a_steady_turn_reads_only_its_historys_ids_and_new_rows(team, agents):
    coder, reviewer = agents["coder"], agents["reviewer"]
    Agent.objects.filter(pk=coder.pk).update(drift_score=100)  # on track: no drift cue to check
    services.anchor_save(team=team, key="db", value="PostgreSQL")
    services.message_add(team=team, author=reviewer, content="First point.")
    _sent(team, coder)
    services.message_add(team=team, author=reviewer, content="Second point, @coder.")
    turn = _claim(team, coder)
    with CaptureQueriesContext(connection) as read:
        request = _request(turn, claims.claimed(turn))
    assert len(read.captured_queries) == 2, [q["sql"][:80] for q in read.captured_queries]
    assert "Second point" in request and "[db] (pinned by the PM): PostgreSQL" in request
    with mock.patch.object(history_kept, "KEEP_HISTORY", False):
        assert _request(turn, None) == request


def test_a_coachs_claim_reads_who_passed_since_it_spoke_as_build_does(team, agents):
    coach, coder, reviewer = agents["coach"], agents["coder"], agents["reviewer"]
    Agent.objects.filter(pk=coach.pk).update(drift_score=100)
    services.message_add(team=team, author=coach, content="Let us start.")
    _sent(team, coach)
    for agent in (coder, reviewer, coder):  # the coder twice: named once
        services.message_add(
            team=team, author=agent, content=f"({agent.name} passes: nothing)", kind="pass_note"
        )
    turn = _claim(team, coach)
    assert claims.claimed(turn).passes == ["coder", "reviewer"]
    with CaptureQueriesContext(connection) as read:
        request = _request(turn, claims.claimed(turn))
    assert "Since you last spoke, coder, reviewer passed" in request
    # Only the history's ids: a pass is not in the history, and who passed came with the claim.
    assert len(read.captured_queries) == 1, [q["sql"][:80] for q in read.captured_queries]
    with mock.patch.object(history_kept, "KEEP_HISTORY", False):
        assert _request(turn, None) == request
    services.message_add(team=team, author=coach, content="Go on.")
    assert claims.claimed(_claim(team, coach)).passes == []


def test_a_claim_reads_the_roster_and_the_previous_snapshot_as_build_does(team, agents):
    coder = agents["coder"]
    services.message_add(team=team, author=agents["coach"], content="Hello.")
    first = _claim(team, coder)
    services.message_add(team=team, author=agents["coach"], content="Again.")
    second = _claim(team, coder)
    claimed = claims.claimed(second)
    assert claimed.seen == first.snapshot_message_id
    assert claimed.seen == history_rows.previously_seen(coder, second.snapshot_message_id)
    assert claimed.roster == system_text.roster(team)
    assert claims.claimed(Turn.objects.get(pk=second.pk)) is None  # read without them


def test_an_anchor_pinned_changed_or_deleted_between_turns_is_in_the_next_request(team, agents):
    coder = agents["coder"]
    services.anchor_save(team=team, key="db", value="PostgreSQL")
    assert "[db] (pinned by the PM): PostgreSQL" in _sent(team, coder)
    services.anchor_save(team=team, key="port", value="8080")  # another worker, the API
    assert "[port] (pinned by the PM): 8080" in _sent(team, coder)
    Anchor.objects.filter(team=team, key="db").update(value="SQLite")  # no save()
    request = _sent(team, coder)
    assert "[db] (pinned by the PM): SQLite" in request and "PostgreSQL" not in request
    Anchor.objects.filter(team=team).delete()
    assert "<immutable-anchors>" not in _sent(team, coder)


def test_an_agent_renamed_or_added_between_turns_is_in_the_next_request(team, agents):
    coder, reviewer = agents["coder"], agents["reviewer"]
    services.message_add(team=team, author=reviewer, content="Tests for each token kind.")
    assert "@reviewer (reviewer)" in _sent(team, coder)
    reviewer.name = "checker"
    services.agent_update(agent=reviewer, fields=["name"])
    request = _sent(team, coder)
    assert "@checker (reviewer)" in request and "[checker]: Tests" in request
    Agent.objects.filter(pk=reviewer.pk).update(name="critic")  # no save()
    Agent.objects.filter(pk=agents["coach"].pk).update(position=99)
    request = _sent(team, coder)
    team_lines = request.split("besides discussing and reading the workspace:", 1)[1]
    assert [line.split(":")[0] for line in team_lines.split("\\n")[1:5]] == [
        "- @researcher (researcher)",
        "- you (@coder, coder)",
        "- @critic (reviewer)",
        "- @coach (coach)",
    ]


def test_an_mcp_server_added_changed_relisted_or_deleted_shows_in_the_next_request(team, agents):
    coder = agents["coder"]
    assert not any("__" in name for name in _tool_names(_sent(team, coder)))
    server = make_mcp_server(team, name="docs", approval="auto")
    mcp_servers.mcp_server_record_tools(server=server, tools=[ECHO])
    assert "docs__echo" in _tool_names(_sent(team, coder))
    mcp_servers.mcp_server_update(server=server, changes={"approval": "ask"})
    echo = next(t for t in json.loads(_sent(team, coder))["tools"] if t["name"] == "docs__echo")
    assert "waits for the PM's approval" in echo["description"]
    McpServer.objects.filter(pk=server.pk).update(roles=["reviewer"])  # no save()
    assert "docs__echo" not in _tool_names(_sent(team, coder))
    McpServer.objects.filter(pk=server.pk).update(roles=[])
    lookup = {**ECHO, "name": "lookup"}
    mcp_servers.mcp_server_record_tools(server=server, tools=[ECHO, lookup])
    assert {"docs__echo", "docs__lookup"} <= set(_tool_names(_sent(team, coder)))
    mcp_servers.mcp_server_delete(server=server)
    assert not any("__" in name for name in _tool_names(_sent(team, coder)))


def _peers(request: str) -> list[str] | None:
    """The consultants ask_peer names, or None when it is not offered (none enabled)."""
    ask_peer = next((t for t in json.loads(request)["tools"] if t["name"] == "ask_peer"), None)
    return None if ask_peer is None else ask_peer["input_schema"]["properties"]["peer"]["enum"]


def test_a_consultant_enabled_changed_or_disabled_shows_in_the_next_request(team, agents):
    coder = agents["coder"]
    assert _peers(_sent(team, coder)) is None
    critic = ConsultantProfile.objects.create(name="critic", model="loom-offline")
    team.consultants.add(critic)
    assert _peers(_sent(team, coder)) == ["critic"]
    ConsultantProfile.objects.filter(pk=critic.pk).update(strengths="finds the holes")
    assert "critic (finds the holes)" in _sent(team, coder)
    ConsultantProfile.objects.filter(pk=critic.pk).update(enabled=False)
    assert _peers(_sent(team, coder)) is None
    ConsultantProfile.objects.filter(pk=critic.pk).update(enabled=True)
    team.consultants.remove(critic)
    assert _peers(_sent(team, coder)) is None


def test_the_teams_tool_settings_changed_between_turns_are_in_the_next_request(team, agents):
    coder = agents["coder"]
    assert "peer_message" in _tool_names(_sent(team, coder))
    Team.objects.filter(pk=team.pk).update(tool_access={"peer_message": {"roles": ["coach"]}})
    assert "peer_message" not in _tool_names(_sent(team, coder))
    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "never"})
    Team.objects.filter(pk=team.pk).update(tool_access={}, max_anchors=7)
    request = _sent(team, coder)
    assert "peer_message" not in _tool_names(request) and "at most 7 anchors" in request
    assert "file_write" not in _tool_names(request)
    Team.objects.filter(pk=team.pk).update(phase_index=team.phases.index("implementation"))
    assert "file_write" in _tool_names(_sent(team, coder))


def test_an_anchor_a_tool_saves_is_in_the_turns_next_request_and_the_next_turns(team, messages_api):
    """The worker kept the anchors block of the turn's first request: the request after
    the save_anchor call carries the new anchor all the same, as does the next turn."""
    services.anchor_save(team=team, key="db", value="PostgreSQL")
    Team.objects.filter(pk=team.pk).update(max_turns=2)
    api = messages_api(
        per_agent(
            {
                "coach": [
                    tool("save_anchor", {"key": "format", "value": "HTML"}, "toolu_pin"),
                    text("Pinned."),
                ],
                "researcher": [text("Noted.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team)
    coach = [r for r in api.requests if r.agent == "coach"]
    researcher = [r for r in api.requests if r.agent == "researcher"]
    assert "[db] (pinned by the PM): PostgreSQL" in coach[0].system_text
    assert "(pinned by coach in refinement): HTML" not in coach[0].system_text
    assert (
        "(pinned by coach in refinement): HTML" in coach[1].system_text
    )  # the same turn, after the call
    assert "(pinned by coach in refinement): HTML" in researcher[0].system_text
