"""What each phase should produce and what each role does in it: Loom's defaults,
which a team's own `phase_guide` overrides line by line.

Every agent's system prompt carries the phase order, this phase's line for its role
and who closes the phase, so members know the phase as well as the coach does."""

from __future__ import annotations

import re
from collections.abc import Sequence

from teams.models import Team

GENERIC = "generic"  # the lines of a phase with a name Loom has no defaults for

DEFAULT_GUIDE: dict[str, dict[str, str]] = {
    "refinement": {
        "produce": "an agreed statement of the goal: scope, users, constraints, and what "
        "is out of scope",
        "coach": "draw out what the goal means; ask the PM what only the PM can decide",
        "researcher": "bring the facts, prior art and risks that bear on the scope",
        "coder": "say what is feasible and what would be costly to build",
        "reviewer": "point out ambiguities and missing requirements",
        "tester": "say how the team will know the goal is met",
        "external": "add what your program knows about the goal",
    },
    "planning": {
        "produce": "a task list with owners and an order",
        "coach": "drive the team to a plan with owners; close the phase when it is agreed",
        "researcher": "flag tasks that need research and the risks in the order",
        "coder": "break the work into tasks you can build and estimate them",
        "reviewer": "check the plan covers the goal and has no gaps",
        "tester": "add the tasks that prove the work is right",
        "external": "say which tasks your program can take",
    },
    "pre-code-review": {
        "produce": "reviewed interfaces and a plan with its concerns resolved",
        "coach": "collect concerns and see each one resolved or consciously accepted",
        "researcher": "check the design against what you found",
        "coder": "present the interfaces you will build and answer concerns",
        "reviewer": "review the plan and interfaces before code is written",
        "tester": "check the design can be tested",
        "external": "check the interfaces fit your program",
    },
    "implementation": {
        "produce": "the work itself, written to the workspace",
        "coach": "keep the coder unblocked and the others reviewing small steps",
        "researcher": "answer the questions that come up while building",
        "coder": "build the agreed tasks and write the files; say what you wrote",
        "reviewer": "review each step as it lands and fix small problems",
        "tester": "write down how each piece will be checked",
        "external": "build or check your program's part",
    },
    "code-review": {
        "produce": "a review of the result against the goal, with its outcome",
        "coach": "have the result reviewed against the goal; see each finding fixed and "
        "re-checked, or consciously accepted; close with the outcome",
        "researcher": "check the result against the facts and risks you raised",
        "coder": "walk the others through what was built; fix each finding in place (an "
        "edit, not a rewrite) and run the tests again, then say what you changed",
        "reviewer": "review the written files against the goal and the plan; name each "
        "finding (the file, what is wrong, what would be right), and re-check it once fixed",
        "tester": "check the result as you planned to; run the tests and report what fails",
        "external": "check the result from your program's side",
    },
    GENERIC: {
        "produce": "what the phase's name says, agreed by the team",
        "coach": "guide the team through the phase; close it when its work is done",
        "researcher": "bring the facts the phase needs",
        "coder": "do the building this phase needs",
        "reviewer": "check what the phase produces",
        "tester": "check how the phase's result can be proved",
        "external": "add what your program knows",
    },
}

# Words that make a phase "implementation-like": where files are written by default.
IMPLEMENTATION_WORDS = ("implement", "build", "develop", "coding", "construct")
IMPLEMENTATION_LIKE = (
    "implementation-like phases (their names contain " + ", ".join(IMPLEMENTATION_WORDS) + ")"
)
# Words that make a phase "review-like": where work is checked, commands run by default,
# and, after an implementation-like phase, what review finds is fixed in place.
REVIEW_WORDS = ("review", "test", "verify", "qa")
WORK_PHASES = (
    "implementation-like and review-like phases (their names contain "
    + ", ".join(IMPLEMENTATION_WORDS + REVIEW_WORDS)
    + ")"
)
WRITE_PHASES = (
    IMPLEMENTATION_LIKE
    + " and the review-like phases after one (their names contain "
    + ", ".join(REVIEW_WORDS)
    + ")"
)


# One search of the lowered name instead of a loop over the words: the test runs for
# every phase of a team on every turn (the system text names where tools work).
_IMPLEMENTATION = re.compile("|".join(map(re.escape, IMPLEMENTATION_WORDS)))


def implementation_like(phase: str) -> bool:
    return _IMPLEMENTATION.search(phase.lower()) is not None


def review_like(phase: str) -> bool:
    name = phase.lower()
    return any(word in name for word in REVIEW_WORDS)


def work_phase(phase: str, phases: Sequence[str] = ()) -> bool:
    """A phase where agents build or check the work itself, step by step, not only talk
    (by its name alone: `phases`, the team's order, is what every phase rule is given)."""
    return implementation_like(phase) or review_like(phase)


def fixes_after_review(phase: str, phases: Sequence[str]) -> bool:
    """A review-like phase after an implementation-like one of `phases` (the team's
    order): what its review finds is fixed there, by the writers, not left for later."""
    if implementation_like(phase) or not review_like(phase) or phase not in phases:
        return False
    return any(implementation_like(p) for p in phases[: list(phases).index(phase)])


def write_phase(phase: str, phases: Sequence[str] = ()) -> bool:
    """Where files are written by default: implementation-like phases, and the
    review-like phases after one (a finding is fixed where it is found)."""
    return implementation_like(phase) or fixes_after_review(phase, phases)


def phase_line(team: Team, phase: str, key: str) -> str:
    """The team's line for `key` ("produce" or a role) in `phase`, else Loom's."""
    own = (team.phase_guide or {}).get(phase) or {}
    if own.get(key):
        return own[key]
    defaults = DEFAULT_GUIDE.get(phase) or DEFAULT_GUIDE[GENERIC]
    return defaults.get(key, "")


def phase_order(team: Team, phase: str) -> str:
    """The phases in order with the current one marked: "a → [b] → c"."""
    return " → ".join(f"[{p}]" if p == phase else p for p in team.phases)


def effective_guide(team: Team) -> dict[str, dict[str, str]]:
    """Every phase of the team with its lines as agents read them (for people)."""
    keys = sorted(DEFAULT_GUIDE[GENERIC])
    return {phase: {key: phase_line(team, phase, key) for key in keys} for phase in team.phases}
