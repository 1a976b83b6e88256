"""The drift score (teams/drift.py), pinned for hand-computed states: each input and
each threshold."""

import pytest

from teams.drift import chain_breaks, health, score
from teams.models import Agent


def agent(**fields) -> Agent:
    """An unsaved agent in a given state: a score needs no database."""
    return Agent(name="coder", role="coder", **fields)


ON_TRACK = {"trajectory": "Ship it", "tactic": "Small steps", "action": "Write the test"}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({}, 70),  # nothing declared: 100 - 30
        (ON_TRACK, 100),
        ({**ON_TRACK, "turns": 2}, 100),  # two turns since the last update: grace
        ({**ON_TRACK, "turns": 3}, 97),  # one past the grace: - 3
        ({**ON_TRACK, "turns": 12}, 70),  # ten past: - 30, the most staleness costs
        ({**ON_TRACK, "turns": 40}, 70),
        ({**ON_TRACK, "turns": 40, "last_context_update_turn": 39}, 100),  # updated lately
        ({"tactic": "Small steps"}, 55),  # no trajectory - 30, a tactic without one - 15
        ({"action": "Write the test"}, 55),  # no trajectory - 30, action without tactic - 15
        ({"tactic": "t", "action": "a"}, 55),  # - 30 - 15: the action has its tactic
        ({**ON_TRACK, "violations": 1}, 90),
        ({**ON_TRACK, "violations": 5}, 70),  # at most - 30 for violations
        ({"trajectory": "Ship it", "files_touched": ["a.py"]}, 90),  # files, no action
        ({**ON_TRACK, "files_touched": ["a.py"]}, 100),  # files under an action
        ({"turns": 20, "violations": 9, "action": "x", "files_touched": ["a"]}, 0),  # clamped
    ],
)
def test_score(state, expected):
    assert score(agent(**state)) == expected


def test_chain_breaks():
    assert chain_breaks(agent(**ON_TRACK)) == []
    assert chain_breaks(agent(tactic="t")) == ["Tactic set without a trajectory."]
    assert chain_breaks(agent(trajectory="g", action="a")) == ["Action set without a tactic."]


@pytest.mark.parametrize(
    ("value", "meaning"),
    [
        (100, "healthy"),
        (70, "healthy"),
        (69, "some drift"),
        (40, "some drift"),
        (39, "significant drift"),
        (0, "significant drift"),
    ],
)
def test_thresholds(value, meaning):
    assert health(value) == meaning
