"""Suite files: the shipped ones load; each mistake names its line and field; --set
changes the template or says what is wrong with it."""

from pathlib import Path

import pytest

from teams.evals.suites import SuiteError, suite_load, suite_read

ROOT = Path(__file__).resolve().parents[3]
GOOD = """name: s
team:
  agents:
    - {name: coach, role: coach}
    - {name: coder, role: coder}
cases:
  - name: a
    goal: g
    checks:
      - file_exists: a.txt
"""


def refusal(text: str, *overrides: str) -> str:
    with pytest.raises(SuiteError) as raised:
        suite_read(text, source="s.yaml", overrides=list(overrides))
    return raised.value.message


@pytest.mark.parametrize("name", ["demo.yaml", "stricter.yaml"])
def test_the_shipped_suites_load(name):
    suite = suite_load(ROOT / "evals" / name)
    assert suite.name == "demo" and suite.cases


def test_not_yaml_names_the_line():
    assert refusal(GOOD + "  - name: [b\n") == (
        "s.yaml, line 12: not valid YAML (expected ',' or ']', but got '<stream end>')."
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (("role: coder}", "role: boss}"), "line 5, team.agents[1].role: Input should be"),
        (
            ("file_exists: a.txt", "file_exists: ../a.txt"),
            "line 10, cases[0].checks[0]"
            ".file_exists: '../a.txt' is not a relative path inside the workspace",
        ),
        (
            ("file_exists: a.txt", "nothing: 1"),
            "line 10, cases[0].checks[0]: a check has "
            "exactly one of command, file_exists, file_contains, max_turns, max_cost_usd, rubric",
        ),
        (
            ("file_exists: a.txt", "{file_contains: {path: a, pattern: '('}}"),
            "line 10, cases[0].checks[0].file_contains.pattern: not a regular expression",
        ),
        (
            ("team:\n", "team:\n  slug: x\n"),
            "line 3, team: slug is not set in a suite: each case's team gets its own slug",
        ),
    ],
)
def test_a_mistake_names_its_line_and_field(change, said):
    assert f"s.yaml, {said}" in refusal(GOOD.replace(*change))


def test_two_cases_of_one_name_are_refused():
    twice = GOOD + "  - name: a\n    goal: h\n    checks: [{max_turns: 3}]\n"
    assert refusal(twice) == "s.yaml, line 7, cases: two cases are named 'a'"


def test_set_changes_the_template():
    suite = suite_read(
        GOOD,
        overrides=[
            "agents.coder.model=claude-haiku-4-5",
            "max_turns=7",
            "phases=implementation,code-review",
        ],
    )
    assert suite.team.agents[1].model == "claude-haiku-4-5"
    assert suite.team.max_turns == 7
    assert suite.team.phases == ["implementation", "code-review"]


def test_set_gives_an_agent_its_reply_size():
    suite = suite_read(GOOD, overrides=["agents.coder.max_tokens=4096"])
    assert suite.team.agents[1].max_tokens == 4096
    said = refusal(GOOD, "agents.coder.max_tokens=10")
    assert said == (
        "s.yaml, line 5, team.agents[1].max_tokens: Input should be greater than or equal to 256"
    )


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (
            "agents.tester.model=x",
            "--set agents.tester.model: no agent named 'tester' (there are: coach, coder).",
        ),
        ("max_turns", "--set max_turns: give KEY=VALUE, e.g. agents.coder.model=loom-offline."),
        (
            "agents.coder=x",
            "--set agents.coder: name the agents item and its field, e.g. agents.NAME.model=...",
        ),
        ("max_turnz=3", "s.yaml, line 3, team.max_turnz: Extra inputs are not permitted"),
    ],
)
def test_a_bad_set_says_what_is_wrong(setting, said):
    assert refusal(GOOD, setting) == said
