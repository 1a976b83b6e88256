"""Reads compiled once (teams.prepared): the same model instances as the ORM's, with
their related rows, annotations and converted values, for whatever values a call
brings; a query whose values do not come out as parameters runs through the ORM."""

from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Q

from teams import prepared
from teams.engine import claims
from teams.models import Team, Turn
from teams.prepared import prepared_rows
from teams.run import turns
from tests.helpers import make_team, make_turn

pytestmark = pytest.mark.django_db


def _same(found, expected):
    assert [type(o) for o in found] == [type(o) for o in expected]
    for got, want in zip(found, expected, strict=True):
        fields = [f.attname for f in type(want)._meta.concrete_fields]
        assert {f: getattr(got, f) for f in fields} == {f: getattr(want, f) for f in fields}
        assert got._state.adding is False and got._state.db == want._state.db


def _claimed(pk):
    return (
        Turn.objects.select_related("team", "agent")
        .filter(pk=pk)
        .annotate(**claims.claim_annotations())
    )


def test_a_claimed_turn_reads_as_the_orm_reads_it_for_each_turn():
    team = make_team(max_cost_usd=Decimal("12.50"))
    agents = list(team.agents.order_by("position"))
    made = [make_turn(agent, snapshot_message_id=None) for agent in agents[:2]]
    for turn in made:
        (found,) = prepared_rows(_claimed, pk=turn.pk)
        (expected,) = _claimed(turn.pk)
        _same([found], [expected])
        _same([found.team, found.agent], [expected.team, expected.agent])
        assert found.team.max_cost_usd == Decimal("12.50")  # converted as the ORM converts
        assert found.started_at == expected.started_at and found.queued_at is not None
        for name in claims.claim_annotations():
            assert getattr(found, name) == getattr(expected, name), name
    assert prepared_rows(_claimed, pk=10**9) == []


def test_the_rotation_reads_each_teams_speakers_with_their_turns():
    alpha, beta = make_team(), make_team(slug="beta")
    coder = alpha.agents.get(name="coder")
    make_turn(coder, status=Turn.Status.RUNNING)
    for team in (alpha, beta):
        found = turns.rotation(team)
        expected = list(turns._speakers(team.id))
        _same(found, expected)
        assert [(a.busy, a.talking, a.waiting) for a in found] == [
            (a.busy, a.talking, a.waiting) for a in expected
        ]
    assert [a.busy for a in turns.rotation(alpha)] == [False, False, True, False]


def test_a_value_used_twice_is_run_through_the_orm_each_time():
    alpha, beta = make_team(), make_team(slug="beta")

    def twice(team_id):  # the value in two places: no single parameter to put it in
        return Team.objects.filter(Q(pk=team_id) | Q(id=team_id) | Q(name=str(team_id)))

    assert prepared_rows(twice, team_id=alpha.pk) == [alpha]
    assert prepared_rows(twice, team_id=beta.pk) == [beta]
    assert prepared._local.kept[twice, connection.vendor, ("team_id",)] is None
