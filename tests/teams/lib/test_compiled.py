"""Annotations compiled once (teams.lib.compiled) read what the ORM reads: each kept
set of a hot statement (the rotation's, the claim's, the claimed turn's read for its
request, the stuck checks') runs both ways on rows that give its values something to
say, and the two must agree; so must each statement written in SQL (the history's
ids) and the ORM's query it stands for. A Django upgrade that changes the compiler
this leans on, or a query that changes without its statement, fails here, loudly, not
in a turn."""

from __future__ import annotations

from itertools import product

import pytest

from teams import services
from teams.conversation import questions
from teams.engine import claims, history_rows
from teams.lib.compiled import compiled
from teams.models import Agent, Keeper, KeeperEntry, Message, Team, Turn
from teams.run import stuck, team_actions, turns
from tests.helpers import make_team

pytestmark = pytest.mark.django_db


def both_ways(queryset, build) -> tuple[list[dict], list[dict]]:
    names = sorted(build())
    orm = queryset.annotate(**build()).order_by("pk").values("pk", *names)
    kept = queryset.annotate(**compiled(queryset.model, build)).order_by("pk")
    return list(orm), list(kept.values("pk", *names))


@pytest.fixture
def talked():
    """A team whose first turn finished (the next one queued), with an anchor, a
    question between two agents and a stuck request."""
    team = make_team("alpha")
    team_actions.team_start(team=team)
    first = turns.turn_claim(Turn.objects.get(team=team).id, "w1")
    turns.turn_finish(turn=first, worker="w1", text="Plan: a state machine.")
    services.anchor_save(team=team, key="db", value="PostgreSQL")
    coder = team.agents.get(name="coder")
    questions.ask(team=team, origin=coder, question="Which parser?", target="reviewer")
    stuck.stuck_request_open(team=team, turn=first, reason="going round")
    return Team.objects.get(pk=team.pk)


def test_the_rotations_subqueries(talked):
    orm, kept = both_ways(Agent.objects.filter(team=talked), turns._unfinished_turns)
    assert orm == kept
    assert [row["busy"] for row in orm].count(True) == 1  # the queued turn's agent
    assert all(row["talking"] for row in orm)


def test_the_claims_subqueries(talked):
    orm, kept = both_ways(Turn.objects.filter(team=talked), turns._claim_expressions)
    assert orm == kept and len(orm) == 2
    assert orm[-1]["snapshot"] > 0 and not any(row["replay_running"] for row in orm)


def test_the_claimed_turns_read_for_its_request(talked):
    orm, kept = both_ways(Turn.objects.filter(team=talked), claims.claim_annotations)
    assert orm == kept
    assert all("PostgreSQL" in row["prompt_anchors"] for row in orm), orm
    assert all("coder" in row["prompt_roster"] for row in orm)


def test_the_stuck_checks_reads(talked):
    orm, kept = both_ways(Team.objects.filter(pk=talked.pk), stuck.checks_read(talked.phase))
    assert orm == kept
    (row,) = orm
    assert row["stuck_open_request"] and row["stuck_after_turn"] and row["stuck_since"]
    assert row["stuck_queries"] and row["stuck_phase"] == talked.phase


@pytest.fixture
def histories():
    """Rows of every kind each term of the history names, in two phases, for two agents
    (inbox lines, records, open questions, notes before and after a last request), two
    teams, pass notes and rows offloaded by one agent but not the other."""
    team, other = make_team("alpha", phases=["plan", "build"]), make_team("beta")
    coder, reviewer = team.agents.get(name="coder"), team.agents.get(name="reviewer")
    question = questions.ask(team=team, origin=coder, question="Which parser?", target="reviewer")
    Kind = Message.Kind
    for phase in ("plan", "build"):
        for kind in Kind.values:
            for recipient, query in product((None, coder, reviewer), (None, question)):
                Message.objects.create(
                    team=team,
                    kind=kind,
                    phase=phase,
                    recipient=recipient,
                    query=query,
                    content=kind,
                )
        Message.objects.create(team=other, kind=Kind.CHAT, phase=phase, content="elsewhere")
    keeper = Keeper.objects.create(team=team, agent=coder, topic="old")
    offloaded = Message.objects.filter(team=team, phase="plan", kind=Kind.CHAT)
    for position, message in enumerate(offloaded):
        KeeperEntry.objects.create(keeper=keeper, message=message, position=position)
    return team, [coder, reviewer]


def test_the_history_ids_statement_reads_what_the_orm_reads(histories):
    team, agents = histories
    ids = list(Message.objects.filter(team=team).values_list("id", flat=True))
    cuts = [ids[0], ids[len(ids) // 3], ids[len(ids) // 2], ids[-1]]
    seen_counts = set()
    for agent in agents:
        for phase in ("plan", "build"):
            for seen in (None, 0, *cuts):
                for until in cuts:
                    orm = history_rows.history_queryset(agent, team, phase, seen)
                    expected = list(orm.filter(id__lte=until).values_list("id", flat=True))
                    got = history_rows.history_ids(agent, team, phase, seen, until)
                    assert got == expected, (agent.name, phase, seen, until)
                    seen_counts.add(len(expected))
    assert len(seen_counts) > 10  # the cases tell the terms apart
    # Offloaded rows are the coder's only; the team's own phase when none is named.
    coder, reviewer = agents
    chat = Message.objects.filter(team=team, phase="plan", kind=Message.Kind.CHAT).first()
    assert chat.id not in history_rows.history_ids(coder, team, "plan", None, ids[-1])
    assert chat.id in history_rows.history_ids(reviewer, team, "plan", None, ids[-1])
    assert history_rows.history_ids(coder, team, None, None, ids[-1]) == list(
        history_rows.history_queryset(coder, team).values_list("id", flat=True)
    )


def _agent_rows(agents) -> list[tuple]:
    fields = [f.attname for f in Agent._meta.concrete_fields]
    return [
        (*(getattr(a, f) for f in fields), bool(a.busy), bool(a.talking), a.waiting) for a in agents
    ]


def test_the_rotation_statement_reads_what_the_orm_reads(talked):
    """Every field through its converter, and what the unfinished turns say, as the
    ORM's query reads them: as the team runs, with an inbox turn, a turn waiting for an
    approval and an external agent (never in the rotation); a team with only an inbox
    turn running."""
    services.agent_create(team=talked, name="bot", role=Agent.Role.EXTERNAL)
    coder = talked.agents.get(name="coder")
    Turn.objects.create(team=talked, agent=coder, purpose=Turn.Purpose.INBOX, number=1)
    reviewer = talked.agents.get(name="reviewer")
    Turn.objects.create(team=talked, agent=reviewer, status=Turn.Status.WAITING, number=2)
    idle = make_team("gamma")  # an inbox turn only: busy, nobody talking
    Turn.objects.create(team=idle, agent=idle.agents.get(name="coder"), purpose="inbox", number=1)
    for team in (talked, idle):
        got = turns.rotation(team)
        assert _agent_rows(got) == _agent_rows(turns.speakers(team))
        assert all(isinstance(a, Agent) for a in got)
    rows = {a.name: a for a in turns.rotation(talked)}
    assert "bot" not in rows and rows["coder"].busy and rows["coach"].talking
    assert not any(a.talking for a in turns.rotation(idle))
    assert rows["coach"].waiting == Turn.objects.get(status=Turn.Status.WAITING).id
