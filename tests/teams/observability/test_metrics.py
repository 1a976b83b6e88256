"""GET /metrics (teams.observability.metrics, loomsite.metrics): Prometheus text parsed with
prometheus_client's own parser after a team ran; the counters match the database."""

import pytest
from django.db.models import Sum
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from teams.models import McpServer, PMRequest, Team, Turn, TurnStep, WebhookDelivery
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent

TOKEN = "metrics-token-0123456789"


def scrape(client=None, **headers) -> dict:
    """{(name, labels as a sorted tuple): value} of one scrape."""
    response = (client or Client()).get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture
def ran(team, messages_api):
    """Alpha ran until its coach asked the PM: a pass, messages, a tool call that
    failed, tokens with cache reads."""
    api = messages_api(
        per_agent(
            {
                "coach": [
                    text("Welcome.", input_tokens=200, output_tokens=10),
                    tool("ask_pm", {"question": "HTML only?"}, "toolu_ask"),
                ],
                "researcher": [tool("pass_turn", {"reason": "nothing yet"}, "toolu_pass")],
                "coder": [
                    tool("read_consultation", {"consultation_id": 999}, "toolu_bad"),
                    text("Layout done.", cache_read_input_tokens=1000),
                ],
                "reviewer": [text("Fine.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team)
    team.refresh_from_db()
    assert team.status == Team.Status.AWAITING_PM
    return api


def test_the_counters_match_the_database(ran, team):
    metrics = scrape()
    for outcome in ("message", "pass", "pm_request"):
        count = Turn.objects.filter(status="done", outcome=outcome).count()
        assert count and metrics[("loom_turns_finished_total", (("outcome", outcome),))] == count
    model = Turn.objects.first().model
    steps = TurnStep.objects.filter(kind="model")
    assert (
        metrics[
            ("loom_model_calls_total", (("model", model), ("purpose", "turn"), ("result", "ok")))
        ]
        == steps.count()
    )
    sums = steps.aggregate(
        input=Sum("input_tokens"), output=Sum("output_tokens"), cache_read=Sum("cache_read_tokens")
    )
    for kind, value in sums.items():
        assert metrics[("loom_tokens_total", (("kind", kind), ("model", model)))] == value
    assert sums["cache_read"] == 1000
    assert metrics[("loom_cost_usd_total", (("team", "alpha"),))] == pytest.approx(
        float(team.spent_usd)
    )
    assert team.spent_usd > 0
    assert metrics[("loom_tool_calls_total", (("result", "ok"), ("tool", "pass_turn")))] == 1
    bad = ("loom_tool_calls_total", (("result", "error"), ("tool", "read_consultation")))
    assert metrics[bad] == 1
    for step in TurnStep.objects.filter(kind="tool"):
        result = "error" if step.content[0].get("is_error") else "ok"
        assert metrics[("loom_tool_calls_total", (("result", result), ("tool", step.tool_name)))]
    assert metrics[("loom_tool_calls_total", (("result", "ok"), ("tool", "ask_pm")))] == 1
    assert metrics[("loom_pm_requests_open", (("kind", "question"),))] == 1
    assert metrics[("loom_pm_requests_open", (("kind", "approval"),))] == 0
    assert metrics[("loom_pm_request_oldest_age_seconds", (("kind", "question"),))] >= 0
    assert metrics[("loom_turns_queued", ())] == 0
    assert metrics[("loom_queue_oldest_age_seconds", ())] == 0
    assert metrics[("loom_turns_running", ())] == 0
    assert metrics[("loom_live_sockets", ())] == 0
    # The in-process latency histogram counted every model call of the run.
    calls = sum(
        v
        for (name, labels), v in metrics.items()
        if name == "loom_model_call_seconds_count" and ("model", model) in labels
    )
    assert calls >= steps.count()


def test_gauges_follow_the_queue_requests_webhooks_and_mcp_servers(team, other_team):
    Team.objects.filter(pk=team.pk).update(status=Team.Status.RUNNING)
    coach = team.agents.get(name="coach")
    Turn.objects.create(team=team, agent=coach, number=1)
    PMRequest.objects.create(team=team, question="Approve?", kind=PMRequest.Kind.APPROVAL)
    McpServer.objects.create(team=team, name="files", transport="stdio", command=["x"])
    McpServer.objects.create(
        team=other_team, name="search", transport="http", url="http://x", error="refused"
    )
    metrics = scrape()
    assert metrics[("loom_turns_queued", ())] == 1
    assert metrics[("loom_queue_oldest_age_seconds", ())] >= 0
    assert metrics[("loom_pm_requests_open", (("kind", "approval"),))] == 1
    assert metrics[("loom_mcp_server_up", (("server", "files"), ("team", "alpha")))] == 1
    assert metrics[("loom_mcp_server_up", (("server", "search"), ("team", "beta")))] == 0
    for status in WebhookDelivery.Status.values:
        assert metrics[("loom_webhook_deliveries_total", (("status", status),))] == 0


def test_teams_are_named_by_slug_only(ran, team):
    body = Client().get("/metrics").content.decode()
    assert 'team="alpha"' in body
    assert team.goal not in body and "Welcome." not in body and "HTML only?" not in body
    assert "sk-test-key" not in body


def test_without_a_token_only_loopback_clients_are_answered(db):
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200
    refused = Client(REMOTE_ADDR="203.0.113.9").get("/metrics")
    assert refused.status_code == 403 and "LOOM_METRICS_TOKEN" in refused.json()["detail"]


def test_behind_a_trusted_proxy_the_forwarded_client_counts(db, settings):
    settings.LOOM_TRUSTED_PROXIES = 1
    proxied = Client(REMOTE_ADDR="127.0.0.1")
    response = proxied.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})
    assert response.status_code == 403


def test_with_a_token_it_is_required(db, settings):
    settings.LOOM_METRICS_TOKEN = TOKEN
    local = Client(REMOTE_ADDR="127.0.0.1")
    assert local.get("/metrics").status_code == 401
    wrong = local.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    remote = Client(REMOTE_ADDR="203.0.113.9")
    assert scrape(remote, Authorization=f"Bearer {TOKEN}")[("loom_turns_queued", ())] == 0


def test_a_post_is_refused(db):
    assert Client().post("/metrics").status_code == 405
