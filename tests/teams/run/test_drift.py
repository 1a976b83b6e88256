"""The drift score (teams/run/drift.py), pinned for hand-computed states: each input and
each threshold; the one vocabulary of its bands; the advice; and the score of agents
that never call a mesh tool, over turns as the engine counts them."""

import pytest
from django.db.models import F

from teams.conversation import hierarchy
from teams.models import Agent
from teams.run import drift
from teams.run.drift import chain_breaks, health, meaning, recommendation, score
from tools import mesh as mesh_tools  # noqa: F401  (registers the tools the advice names)


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
        ({**ON_TRACK, "violations": 5}, 50),
        ({**ON_TRACK, "violations": 9}, 40),  # at most - 60 for violations
        ({"trajectory": "Ship it", "files_touched": ["a.py"]}, 100),  # within the grace
        ({"trajectory": "Ship it", "files_touched": ["a.py"], "turns": 3}, 87),  # - 3 - 10
        ({**ON_TRACK, "files_touched": ["a.py"], "turns": 3}, 97),  # files under an action
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
    ("value", "words"),
    [
        (100, "on track"),
        (70, "on track"),
        (69, "some drift"),
        (40, "some drift"),
        (39, "significant drift"),
        (0, "significant drift"),
    ],
)
def test_one_vocabulary_for_the_bands(value, words):
    assert meaning(value) == health(value) == words
    assert next(w for lowest, w in drift.bands() if value >= lowest) == words


def test_the_advice_speaks_the_bands_words_and_names_the_tools():
    assert recommendation(100, []) == "✅ On track. Continue working."
    assert recommendation(100, ["Action set without a tactic."]).startswith(
        "⚠ Some drift detected. Consider using map_context to update your focus."
    )
    assert recommendation(40, []) == (
        "⚠ Some drift detected. Consider using map_context to update your focus."
    )
    assert recommendation(39, []) == (
        "❌ Significant drift. Use map_context to re-focus, or context_offload to reset."
    )
    # The pages' words: the same advice without the seed's marks.
    assert recommendation(39, [], marks=False) == (
        "Significant drift. Use map_context to re-focus, or context_offload to reset."
    )
    assert recommendation(40, [], marks=False).startswith("Some drift detected.")


# --- agents over turns, as the engine counts them ------------------------------------


def take_turns(agent: Agent, n: int, phase: str, *, violation_each_turn=False) -> Agent:
    """`n` turns of an agent that never calls a mesh tool: Loom begins the phase at
    each turn's start, and the turn's end counts it and records its score."""
    for _ in range(n):
        hierarchy.agent_phase_begin(agent=agent, team=agent.team, phase=phase)
        if violation_each_turn:
            hierarchy.agent_record_violation(agent=agent)
        agent.turns += 1
        Agent.objects.filter(pk=agent.pk).update(turns=F("turns") + 1, drift_score=score(agent))
    return Agent.objects.get(pk=agent.pk)


@pytest.mark.django_db
def test_an_agent_that_only_talks_stays_on_track(agents):
    coder = take_turns(agents["coder"], 6, "refinement")
    assert coder.trajectory == (
        "As coder in refinement: say what is feasible and what would be costly to build"
    )
    assert (coder.drift_score, meaning(coder.drift_score)) == (88, "on track")  # - 3 x 4
    coder = take_turns(coder, 20, "refinement")
    assert meaning(coder.drift_score) == "on track"  # staleness alone costs at most 30
    coder = take_turns(coder, 1, "planning")  # a new phase: a new declaration
    assert coder.drift_score == 100


@pytest.mark.django_db
def test_an_agent_whose_calls_are_refused_every_turn_drifts_significantly(agents):
    coder = take_turns(agents["coder"], 6, "refinement", violation_each_turn=True)
    assert coder.violations == 6
    assert (coder.drift_score, meaning(coder.drift_score)) == (28, "significant drift")
