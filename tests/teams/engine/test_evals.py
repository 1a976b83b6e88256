"""The rubric judge against the fake Messages API (the real anthropic SDK): what it is
sent, its verdict recorded, its cost counted and budgeted; rescoring asks no model
for the team."""

import json

import pytest
from django.core.management import call_command

from teams.evals.judge import VERDICT_TOOL
from teams.models import EvalRun, ModelCall, Turn
from tests.fakes.messages_api import text, tool
from tests.teams.evals.helpers import GOAL, PLAN, case, checks_of, run_eval, suite_file

pytestmark = pytest.mark.django_db
JUDGE = "claude-haiku-4-5"
RUBRIC = "The outline names the core, its checks and the command."


def verdict(passed=True, reasons="The outline in notes/plan.md names all three."):
    return tool(VERDICT_TOOL, {"passed": passed, "reasons": reasons}, input_tokens=900)


def test_a_rubric_check_asks_the_judge_with_the_goal_and_the_files(tmp_path, messages_api):
    api = messages_api([verdict()])
    checks = [{"rubric": RUBRIC, "model": JUDGE}]

    report = run_eval(tmp_path, suite_file(tmp_path, [case(checks=checks)]))

    assert checks_of(report, "outline") == [
        {
            "kind": "rubric",
            "passed": True,
            "detail": f"The judge ({JUDGE}) passed: The outline in notes/plan.md names all three.",
        }
    ]
    (request,) = api.requests  # the team is offline: the judge's is the only request
    asked = request.body["messages"][0]["content"]
    assert request.body["model"] == JUDGE and request.tool_names == [VERDICT_TOOL]
    assert GOAL in asked and RUBRIC in asked
    assert f"--- {PLAN}\n# Plan (offline model)" in asked  # the file, with its text
    call = ModelCall.objects.get(purpose=ModelCall.Purpose.EVAL_JUDGE)
    assert call.model == JUDGE and call.input_tokens == 900 and call.cost_usd > 0
    assert EvalRun.objects.get().judge_spent_usd == call.cost_usd
    assert report["cases"][0]["cost_usd"] == 0.0  # the judge's cost is not the team's work


def test_a_judge_that_says_no_fails_the_case_with_its_reasons(tmp_path, messages_api):
    messages_api([verdict(False, "There is no command in the outline.")])
    checks = [{"file_exists": PLAN}, {"rubric": RUBRIC}]

    report = run_eval(tmp_path, suite_file(tmp_path, [case(checks=checks)], judge=JUDGE))

    assert checks_of(report, "outline")[1] == {
        "kind": "rubric",
        "passed": False,
        "detail": f"The judge ({JUDGE}) failed: There is no command in the outline.",
    }
    assert report["cases"][0]["passed"] is False


def test_a_reply_without_a_verdict_is_a_failed_check_saying_so(tmp_path, messages_api):
    messages_api([text("Looks fine to me!")])
    checks = [{"rubric": RUBRIC, "model": JUDGE}]

    report = run_eval(tmp_path, suite_file(tmp_path, [case(checks=checks)]))

    (check,) = checks_of(report, "outline")
    assert check["passed"] is False
    assert check["detail"] == (
        "Error: the check could not be made: ModelError: the judge's reply gave no verdict"
    )


def test_the_judge_budget_stops_a_call_before_it_is_made(tmp_path, messages_api):
    api = messages_api([verdict()])
    checks = [{"rubric": RUBRIC, "model": JUDGE}]
    suite = suite_file(tmp_path, [case(checks=checks)], judge_max_cost_usd=0.0001)

    report = run_eval(tmp_path, suite)

    (check,) = checks_of(report, "outline")
    assert check["passed"] is False
    assert "would cross the run's judge budget ($0.0001 left); it was not made" in check["detail"]
    assert api.requests == []


def test_rescore_asks_only_the_judge(tmp_path, messages_api):
    first = run_eval(tmp_path, suite_file(tmp_path, [case()]), "--repeat", "2")
    turns = Turn.objects.count()
    api = messages_api([verdict(), verdict()])
    judged = suite_file(tmp_path, [case(checks=[{"rubric": RUBRIC, "model": JUDGE}])])
    out = tmp_path / "rescored.json"

    call_command("eval", "rescore", str(first["run"]), "--suite", str(judged), "--json", str(out))

    rescored = json.loads(out.read_text())
    assert [c["checks"][0]["passed"] for c in rescored["cases"]] == [True, True]
    assert len(api.requests) == 2
    assert all(r.tool_names == [VERDICT_TOOL] for r in api.requests)  # no agent's request
    assert Turn.objects.count() == turns
