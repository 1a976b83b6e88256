"""Anchors' limits and source (teams.services.anchor_save, the PM's pin_as): a team
holds at most `max_anchors`, an agent's value at most `anchor_value_limit`
characters, the PM's the human limit; each anchor says who pinned it and when."""

import pytest

from teams import services
from teams.conversation import hierarchy, pm_requests
from teams.errors import InvalidInput, PermissionDenied
from teams.models import HUMAN_TEXT_LIMIT, Anchor, AnchorRevision

pytestmark = pytest.mark.django_db


def with_limits(team, *, count=None, length=None):
    if count is not None:
        team.max_anchors = count
    if length is not None:
        team.anchor_value_limit = length
    team.save(update_fields=["max_anchors", "anchor_value_limit"])
    return team


def test_the_pms_anchor_is_the_default_source(team):
    anchor = services.anchor_save(team=team, key="lang", value="Python", changed_by="pm (ada)")
    assert (anchor.source, anchor.phase) == (Anchor.Source.PM, "")
    assert hierarchy.anchor_source_text(anchor) == "the PM"


def test_the_cap_counts_every_anchor_and_lets_a_key_be_replaced(team):
    with_limits(team, count=2)
    services.anchor_save(team=team, key="a", value="1")
    services.anchor_save(team=team, key="b", value="2", source=Anchor.Source.AGENT)
    with pytest.raises(InvalidInput, match=r"already has 2 anchors, its limit\. ") as refused:
        services.anchor_save(team=team, key="c", value="3")
    assert refused.value.field == "key"
    assert "have the PM delete an anchor or raise the team's limit" in refused.value.message
    assert not AnchorRevision.objects.filter(key="c").exists()
    services.anchor_save(team=team, key="b", value="two")  # replacing is fine at the cap
    services.anchor_delete(team=team, key="a", changed_by="pm")  # and freeing a place
    services.anchor_save(team=team, key="c", value="3")
    assert sorted(team.anchors.values_list("key", "value")) == [("b", "two"), ("c", "3")]


def test_an_agents_value_has_the_teams_limit_and_the_pms_the_human_one(team):
    with_limits(team, length=100)
    with pytest.raises(InvalidInput, match="at most 100 characters") as refused:
        services.anchor_save(team=team, key="a", value="x" * 101, source=Anchor.Source.AGENT)
    assert refused.value.field == "value"
    services.anchor_save(team=team, key="a", value="x" * 100, source=Anchor.Source.AGENT)
    pm = services.anchor_save(team=team, key="b", value="y" * HUMAN_TEXT_LIMIT)
    assert len(pm.value) == HUMAN_TEXT_LIMIT
    with pytest.raises(InvalidInput):
        services.anchor_save(team=team, key="b", value="y" * (HUMAN_TEXT_LIMIT + 1))
    # An agent does not replace the PM's value at all (only a person changes it).
    with pytest.raises(PermissionDenied, match="pinned by the PM"):
        services.anchor_save(team=team, key="b", value="z" * 100, source=Anchor.Source.AGENT)


def test_a_new_value_takes_its_new_source_and_the_same_value_keeps_the_first(team):
    services.anchor_save(
        team=team, key="db", value="SQLite", changed_by="coder", source="agent", phase="planning"
    )
    same = services.anchor_save(team=team, key="db", value="SQLite", changed_by="pm")
    assert (same.source, same.updated_by, same.phase) == ("agent", "coder", "planning")
    changed = services.anchor_save(team=team, key="db", value="PostgreSQL", changed_by="pm")
    assert (changed.source, changed.updated_by, changed.phase) == ("pm", "pm", "")


def test_an_answer_pinned_by_the_pm_says_so(team, agents):
    team.phase_index = 1
    team.save(update_fields=["phase_index"])
    request = pm_requests.pm_request_open(team=team, question="HTML only?", agent=agents["coach"])
    pm_requests.pm_request_answer(request_id=request.id, answer="HTML only.", pin_as="format")
    anchor = team.anchors.get(key="format")
    assert (anchor.value, anchor.source, anchor.phase) == ("HTML only.", "pm_answer", "planning")
    assert hierarchy.anchor_source_text(anchor) == "the PM's answer in planning"


def test_a_pin_over_the_cap_changes_nothing(team, agents):
    with_limits(team, count=1)
    services.anchor_save(team=team, key="a", value="1")
    request = pm_requests.pm_request_open(team=team, question="HTML only?", agent=agents["coach"])
    with pytest.raises(InvalidInput, match="its limit"):
        pm_requests.pm_request_answer(request_id=request.id, answer="Yes.", pin_as="format")
    request.refresh_from_db()
    assert request.status == "open" and not team.anchors.filter(key="format").exists()
