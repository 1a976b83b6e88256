"""`manage.py eval run|compare|rescore` on the offline model (and the fake Messages API
where a model must cost or judge), asserted on the JSON report."""

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from teams.files import workspace
from teams.models import Agent, EvalCase, EvalRun, Message, Team, Turn
from tests.fakes.messages_api import text
from tests.teams.evals.helpers import GOAL, PLAN, case, checks_of, run_eval, suite_file

ROOT = Path(__file__).resolve().parents[2]
REPORT_KEYS = {"suite", "run", "settings", "cases", "summary"}
CASE_KEYS = {"case", "repeat", "team", "status", "passed", "checks", "turns", "cost_usd", "seconds"}

pytestmark = pytest.mark.django_db


def test_the_demo_suite_passes_three_cases_and_fails_the_one_marked_so(tmp_path, sandbox_ready):
    report = run_eval(tmp_path, ROOT / "evals" / "demo.yaml")

    assert set(report) == REPORT_KEYS
    assert report["suite"] == "demo"
    assert all(set(c) == CASE_KEYS for c in report["cases"])
    verdicts = {c["case"]: c["passed"] for c in report["cases"]}
    assert verdicts == {
        "outline": True,
        "keeps-the-brief": True,
        "outline-in-budget": True,
        "fails-on-purpose": False,
    }
    assert checks_of(report, "fails-on-purpose")[0] == {
        "kind": "file_exists",
        "passed": False,
        "detail": "shortener.py does not exist",
    }
    hidden = checks_of(report, "fails-on-purpose")[2]
    assert hidden["kind"] == "command" and hidden["passed"] is False
    assert "No module named 'shortener'" in hidden["detail"]
    assert checks_of(report, "outline")[2]["detail"].startswith("exit code 0 after")
    assert report["summary"]["passed"] == 3 and report["summary"]["total"] == 4
    assert report["summary"]["turns"] == sum(c["turns"] for c in report["cases"]) > 0
    team = Team.objects.get(slug=report["cases"][0]["team"])
    assert team.status == Team.Status.DONE
    assert team.eval_case.run_id == report["run"]


HIDDEN_PASSES = """from pathlib import Path

def test_the_plan_names_the_goal():
    assert "Goal: Outline a word counter" in Path("notes/plan.md").read_text()
"""
HIDDEN_FAILS = """from counter import count_words

def test_counts_words():
    assert count_words("a b") == 2
"""


def test_command_checks_run_hidden_tests_on_a_copy_of_the_workspace(tmp_path, sandbox_ready):
    checks = [
        {
            "command": "python3 -m pytest -q check_plan.py",
            "files": {"check_plan.py": HIDDEN_PASSES},
        },
        {
            "command": "python3 -m pytest -q check_counter.py",
            "files": {"check_counter.py": HIDDEN_FAILS},
        },
    ]
    report = run_eval(tmp_path, suite_file(tmp_path, [case(checks=checks)]))

    passes, fails = checks_of(report, "outline")
    assert passes["kind"] == "command" and passes["passed"] is True
    assert passes["detail"].startswith("exit code 0 after") and "1 passed" in passes["detail"]
    assert fails["passed"] is False and fails["detail"].startswith("exit code 2 after")
    assert "No module named 'counter'" in fails["detail"]
    # The team never saw the hidden files: not in its workspace, not in its conversation.
    team = Team.objects.get(slug=report["cases"][0]["team"])
    folder = workspace.workspace_root(team)
    assert (folder / PLAN).is_file()
    assert not (folder / "check_plan.py").exists() and not (folder / "check_counter.py").exists()
    assert not Message.objects.filter(team=team, content__contains="check_").exists()


def test_file_checks_and_the_turn_and_cost_budgets(tmp_path):
    checks = [
        {"file_exists": PLAN},
        {"file_contains": {"path": PLAN, "pattern": "Goal: Outline a word counter"}},
        {"file_contains": {"path": PLAN, "pattern": "def count_words"}},
        {"max_turns": 1},
        {"max_cost_usd": 0},
    ]
    report = run_eval(tmp_path, suite_file(tmp_path, [case(checks=checks)]))

    found = checks_of(report, "outline")
    turns = report["cases"][0]["turns"]
    assert [c["passed"] for c in found] == [True, True, False, False, True]
    assert found[2]["detail"] == f"{PLAN} does not contain /def count_words/"
    assert found[3]["detail"] == f"{turns} turns (at most 1)"
    assert found[4]["detail"] == "$0.0000 (at most $0.0000)"
    assert report["cases"][0]["passed"] is False


def test_an_unscripted_pm_request_fails_the_case_with_the_question(tmp_path):
    report = run_eval(tmp_path, suite_file(tmp_path, [case(pm_answers=[])]))

    first = checks_of(report, "outline")[0]
    assert first["kind"] == "pm_request" and first["passed"] is False
    assert "Unscripted PM request" in first["detail"]
    assert "What should the first version of" in first["detail"]  # the coach's question
    assert report["cases"][0]["status"] == "stopped"
    assert report["cases"][0]["passed"] is False


def test_a_bad_suite_names_the_line_and_field_and_creates_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\n"
        "team:\n"
        "  agents: [{name: coach, role: coach, model: loom-offline}]\n"
        "cases:\n"
        "  - name: one\n"
        "    goal: anything\n"
        "    checks:\n"
        "      - file_exists: a.txt\n"
        "      - max_turns: 0\n"
    )
    with pytest.raises(CommandError) as raised:
        call_command("eval", "run", str(bad))

    assert str(raised.value) == (
        f"{bad}, line 9, cases[0].checks[1].max_turns: Input should be greater than or equal to 1"
    )
    assert not EvalRun.objects.exists() and not Team.objects.exists()


def test_an_unknown_model_is_refused_before_anything_is_made(tmp_path):
    suite = suite_file(tmp_path, [case()])
    refused = r"team.agents\[1\].model: 'gpt-nothing' is a model no endpoint serves"
    with pytest.raises(CommandError, match=refused):
        call_command("eval", "run", str(suite), "--set", "agents.coder.model=gpt-nothing")
    assert not EvalRun.objects.exists() and not Team.objects.exists()


def test_repeat_runs_each_case_on_a_team_of_its_own(tmp_path):
    report = run_eval(tmp_path, suite_file(tmp_path, [case()]), "--repeat", "2")

    assert [(c["case"], c["repeat"]) for c in report["cases"]] == [("outline", 1), ("outline", 2)]
    assert len({c["team"] for c in report["cases"]}) == 2
    assert report["settings"]["repeat"] == 2
    assert report["summary"] == {
        "passed": 2,
        "total": 2,
        "cost_usd": 0.0,
        "turns": sum(c["turns"] for c in report["cases"]),
    }


def test_set_changes_the_template_model_and_phases(tmp_path, messages_api):
    api = messages_api(lambda request: text("On it."))
    checks = [{"max_turns": 40}, {"max_cost_usd": 0}]
    suite = suite_file(tmp_path, [case(checks=checks)])
    report = run_eval(
        tmp_path,
        suite,
        "--set",
        "agents.coder.model=claude-haiku-4-5",
        "--set",
        "phases=implementation,code-review",
        "--set",
        "agents.coder.max_tokens=4096",
    )

    team = Team.objects.get(slug=report["cases"][0]["team"])
    assert Agent.objects.get(team=team, name="coder").model == "claude-haiku-4-5"
    assert team.phases == ["implementation", "code-review"]
    assert report["settings"]["set"] == [
        "agents.coder.model=claude-haiku-4-5",
        "phases=implementation,code-review",
        "agents.coder.max_tokens=4096",
    ]
    assert api.requests and {r.body["model"] for r in api.requests} == {"claude-haiku-4-5"}
    assert {r.body["max_tokens"] for r in api.requests} == {4096}
    cost = checks_of(report, "outline")[1]
    assert report["cases"][0]["cost_usd"] > 0
    assert cost["passed"] is False and cost["detail"].startswith("$0.")


def test_compare_shows_the_cases_that_changed_verdict(tmp_path):
    suite = suite_file(tmp_path, [case("steady"), case("fragile", checks=[{"max_turns": 40}])])
    first = run_eval(tmp_path, suite)
    second = run_eval(tmp_path, suite, "--set", "max_turns=3")
    out = io.StringIO()

    call_command("eval", "compare", str(first["run"]), str(second["run"]), stdout=out)

    lines = out.getvalue().splitlines()
    fragile = next(line for line in lines if line.startswith("fragile"))
    assert fragile.endswith("passed -> failed")
    assert lines[-1] == "Changed verdict: steady, fragile"


def test_rescore_applies_new_checks_with_no_model_call_for_the_team(tmp_path):
    suite = suite_file(tmp_path, [case()])
    first = run_eval(tmp_path, suite)
    turns = Turn.objects.count()
    stricter = suite_file(tmp_path, [case(checks=[{"file_exists": "counter.py"}])])
    out = tmp_path / "rescored.json"

    call_command("eval", "rescore", str(first["run"]), "--suite", str(stricter), "--json", str(out))

    rescored = json.loads(out.read_text())
    assert rescored["run"] == first["run"]
    assert checks_of(rescored, "outline") == [
        {"kind": "file_exists", "passed": False, "detail": "counter.py does not exist"}
    ]
    assert Turn.objects.count() == turns  # the team did not run again
    assert EvalCase.objects.get().checks == checks_of(rescored, "outline")
    assert GOAL in EvalRun.objects.get().suite["cases"][0]["goal"]
