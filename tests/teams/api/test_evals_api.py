"""POST /api/evals and GET /api/evals/{id}: a suite as JSON, 202 with the run's id; the
normal workers run the teams and the sweeper answers, stops and scores them."""

import pytest

from teams.engine import worker
from teams.models import EvalRun, Team
from tests.helpers import ApiClient, api_token, drain
from tests.teams.evals.helpers import GOAL, OFFLINE_TEAM, PLAN

pytestmark = pytest.mark.django_db


def suite(**case):
    return {
        "name": "api-suite",
        "team": OFFLINE_TEAM,
        "cases": [
            {
                "name": "outline",
                "goal": GOAL,
                "pm_answers": ["Keep it small."],
                "checks": [{"file_exists": PLAN}, {"file_exists": "counter.py"}],
                **case,
            }
        ],
    }


def run_to_the_end(run_id: int, limit=200):
    """What the workers and the sweeper do: the turns queued, one sweep after each."""
    for _ in range(limit):
        for team in Team.objects.filter(eval_case__run_id=run_id):
            drain(team, limit=5)
        worker.sweep()
        if EvalRun.objects.get(pk=run_id).status == EvalRun.Status.DONE:
            return
    raise AssertionError("the run did not finish")


def test_a_suite_posted_runs_on_the_workers_and_reads_back_as_its_report(superuser):
    root = ApiClient(api_token(user=superuser, label="evals"))

    response = root.post("/evals", {"suite": suite(), "repeat": 2, "concurrency": 1})

    assert response.status_code == 202
    created = response.json()
    assert created == {"id": created["id"], "status": "running", "cases": 2}
    running = root.get(f"/evals/{created['id']}").json()
    assert [c["status"] for c in running["cases"]] == ["running", "queued"]
    run_to_the_end(created["id"])
    report = root.get(f"/evals/{created['id']}").json()
    assert report["status"] == "done" and report["suite"] == "api-suite"
    assert report["settings"] == {"repeat": 2, "set": [], "concurrency": 1, "source": "api"}
    assert [c["checks"] for c in report["cases"]] == [
        [
            {"kind": "file_exists", "passed": True, "detail": f"{PLAN} exists"},
            {"kind": "file_exists", "passed": False, "detail": "counter.py does not exist"},
        ]
    ] * 2
    assert report["summary"]["passed"] == 0 and report["summary"]["total"] == 2


def test_a_bad_suite_is_a_422_naming_the_field_and_creates_nothing(superuser):
    root = ApiClient(api_token(user=superuser))

    response = root.post("/evals", {"suite": suite(checks=[{"max_turns": 0}])})

    assert response.status_code == 422
    (error,) = response.json()["detail"]
    # ninja's own location, the check's kind (its tag) before its field
    assert error["loc"] == [
        "body",
        "payload",
        "suite",
        "cases",
        0,
        "checks",
        0,
        "max_turns",
        "max_turns",
    ]
    assert error["msg"] == "Input should be greater than or equal to 1"
    assert not EvalRun.objects.exists() and not Team.objects.exists()


def test_set_names_an_agent_that_is_not_there(superuser):
    root = ApiClient(api_token(user=superuser))

    response = root.post("/evals", {"suite": suite(), "set": ["agents.tester.model=x"]})

    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == (
        "--set agents.tester.model: no agent named 'tester' (there are: coach, coder)."
    )
    assert not EvalRun.objects.exists()


def test_another_person_cannot_read_a_run(superuser, pm):
    root = ApiClient(api_token(user=superuser))
    run_id = root.post("/evals", {"suite": suite()}).json()["id"]

    response = ApiClient(api_token(user=pm)).get(f"/evals/{run_id}")

    assert response.status_code == 404
    assert response.json() == {"detail": f"No eval run {run_id}."}
