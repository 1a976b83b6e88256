"""/metrics in the scaled-out layout for real (PostgreSQL, Redis, a daphne web process
and two `runworker` processes, as scripts/scaled_out.py starts them): the web process
reports the turns both workers ran (from the database) and, in prometheus_client's
multiprocess mode, the model calls the workers measured.

Runs when the suite runs on PostgreSQL and LOOM_TEST_REDIS_URL names a Redis server."""

import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from loomsite.env import parse_redis_url
from teams import services
from teams.models import Team, Turn, TurnStep
from teams.run import team_actions
from tests.helpers import worker_redis_url

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
from scaled_out import Layout  # noqa: E402

REDIS_URL = worker_redis_url()
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not REDIS_URL or connection.vendor != "postgresql",
        reason="needs PostgreSQL (LOOM_DATABASE_URL) and Redis (LOOM_TEST_REDIS_URL)",
    ),
]


def database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def samples(url: str) -> list:
    with OPENER.open(url + "/metrics", timeout=10) as response:
        body = response.read().decode()
    return [s for family in text_string_to_metric_families(body) for s in family.samples]


def test_metrics_of_a_web_process_show_the_turns_of_both_workers(settings, tmp_path):
    settings.CHANNEL_LAYERS = {"default": parse_redis_url(REDIS_URL, "LOOM_TEST_REDIS_URL")}
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "LOOM_OFFLINE_DELAY": "0.05"}
    layout = Layout(database_url(), REDIS_URL, web=1, workers=2, env=env, migrate=False)
    with layout:
        slugs = ("north", "south")
        for slug in slugs:  # two teams side by side: both workers get turns
            team = services.team_create(
                slug=slug,
                goal="Prove the scaled-out metrics.",
                agents=[{"name": n, "role": n} for n in ("coach", "researcher", "coder")],
            )
            team_actions.team_start(team=team)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            statuses = set(Team.objects.filter(slug__in=slugs).values_list("status", flat=True))
            active = Turn.objects.filter(status__in=["queued", "running"]).exists()
            if statuses == {Team.Status.AWAITING_PM} and not active:
                break
            time.sleep(0.2)
        found = samples(layout.urls[0])
    by_worker: dict[str, float] = {}
    for s in found:
        if s.name == "loom_worker_turns_total" and s.labels["status"] == "done":
            by_worker[s.labels["worker"]] = s.value
    claimed: dict[str, int] = {}
    for worker in Turn.objects.filter(status="done").values_list("claimed_by", flat=True):
        claimed[worker] = claimed.get(worker, 0) + 1
    assert by_worker == claimed, (by_worker, claimed, layout.logs())
    assert len(by_worker) == 2, "both workers ran turns"
    finished = sum(s.value for s in found if s.name == "loom_turns_finished_total")
    assert finished == Turn.objects.filter(status="done").count()
    # The workers' own measurements reach the web process (multiprocess mode).
    timed = sum(s.value for s in found if s.name == "loom_model_call_seconds_count")
    assert timed == TurnStep.objects.filter(kind="model").count() > 0
