"""The Prometheus metrics of /metrics (loomsite/metrics.py serves them), all defined here.

Nearly every figure is read from the database at scrape time (DatabaseCollector), so
any web process reports the whole deployment, whatever the number of daphne and
worker processes and hosts, and the counters match the database by construction
(they survive restarts; deleting a team lowers them, which Prometheus reads as a
counter reset). Scrape one web process, or aggregate with max() across them.

Two figures exist only in the process that measured them: the model calls' latency
(loom_model_call_seconds) and the spans the tracer dropped. With
PROMETHEUS_MULTIPROC_DIR set (a directory shared by a host's processes, emptied
before they start: prometheus_client's multiprocess mode) a web process reports
those of every process of its host; otherwise its own.

Teams are named by slug only: no goal, no text, no secret in any label."""

from __future__ import annotations

import os
from datetime import datetime

from django.db.models import Count, Min, Q, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# --- measured in the process ---------------------------------------------------------

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
LOCAL = CollectorRegistry(auto_describe=True)

MODEL_CALL_SECONDS = Histogram(
    "loom_model_call_seconds",
    "Latency of model calls (turns, smart retrieval, consultants), by model and result.",
    ["model", "result"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
    registry=LOCAL,
)
SPANS_DROPPED = Counter(
    "loom_trace_spans_dropped",
    "Trace spans not exported: the batch queue was full, or the collector refused or "
    "could not be reached.",
    ["reason"],
    registry=LOCAL,
)


def observe_model_call(model: str, result: str, seconds: float) -> None:
    MODEL_CALL_SECONDS.labels(model=model or "unknown", result=result).observe(seconds)


# --- read from the database ----------------------------------------------------------

# The names /metrics reports from the database (docs/observability.md lists them all).
DATABASE_METRICS = (
    "loom_turns_finished",
    "loom_worker_turns",
    "loom_model_calls",
    "loom_tokens",
    "loom_cost_usd",
    "loom_tool_calls",
    "loom_turns_queued",
    "loom_queue_oldest_age_seconds",
    "loom_turns_running",
    "loom_turns_waiting",
    "loom_workers_live",
    "loom_live_sockets",
    "loom_pm_requests_open",
    "loom_pm_request_oldest_age_seconds",
    "loom_webhook_deliveries",
    "loom_mcp_server_up",
)

TOKEN_KINDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_read": "cache_read_tokens",
    "cache_creation": "cache_creation_tokens",
}


def _age(now: datetime, then) -> float:
    return max(0.0, (now - then).total_seconds()) if then else 0.0


class DatabaseCollector:
    """The deployment's state and history as Prometheus metrics; `live_sockets` is
    counted by the caller (the socket slots, shared through Redis)."""

    def __init__(self, live_sockets: int | None = None):
        self.live_sockets = live_sockets

    def collect(self):
        from teams.observability import health

        now = timezone.now()
        live = [w.worker for w in health.live_workers(now)]
        yield from _turn_families(live)
        yield from _model_call_families()
        yield from _spend_and_tool_families()
        yield from _queue_families(now, live, self.live_sockets)
        yield from _pm_request_families(now)
        yield from _integration_families()


# What DatabaseCollector reads, one group of families each (the models are imported
# when /metrics is read: this module is imported before the apps are ready).


def _turn_families(live: list[str]):
    from teams.models import Turn

    S = Turn.Status
    finished = CounterMetricFamily(
        "loom_turns_finished", "Turns finished, by outcome.", labels=["outcome"]
    )
    ended = Turn.objects.filter(status__in=[S.DONE, S.FAILED, S.CANCELLED])
    for row in ended.values("status", "outcome").annotate(n=Count("id")).order_by():
        outcome = row["outcome"] or row["status"]
        finished.add_metric([outcome], row["n"])
    yield finished

    by_worker = CounterMetricFamily(
        "loom_worker_turns",
        "Turns claimed by each live worker (host:pid:nonce), by status.",
        labels=["worker", "status"],
    )
    claimed = Turn.objects.filter(claimed_by__in=live)
    for row in claimed.values("claimed_by", "status").annotate(n=Count("id")).order_by():
        by_worker.add_metric([row["claimed_by"], row["status"]], row["n"])
    yield by_worker


def _model_call_families():
    from teams.models import Consultation, ModelCall, Turn, TurnStep

    calls = CounterMetricFamily(
        "loom_model_calls",
        "Model calls, by model, purpose and result (a failed turn call is the error "
        "that failed its turn).",
        labels=["model", "purpose", "result"],
    )
    tokens = CounterMetricFamily(
        "loom_tokens", "Tokens of model calls, by model and kind.", labels=["model", "kind"]
    )
    token_sums = {f"{kind}": Sum(field) for kind, field in TOKEN_KINDS.items()}
    totals: dict[tuple[str, str], int] = {}

    def add_tokens(model, row):
        for kind in TOKEN_KINDS:
            key = (model or "unknown", kind)
            totals[key] = totals.get(key, 0) + (row[kind] or 0)

    steps = TurnStep.objects.filter(kind=TurnStep.Kind.MODEL)
    for row in steps.values("turn__model").annotate(n=Count("id"), **token_sums).order_by():
        calls.add_metric([row["turn__model"] or "unknown", "turn", "ok"], row["n"])
        add_tokens(row["turn__model"], row)
    failed = Turn.objects.filter(status=Turn.Status.FAILED).exclude(
        Q(error__startswith="Internal error") | Q(error__startswith="Gave up")
    )
    for row in failed.values("model").annotate(n=Count("id")).order_by():
        calls.add_metric([row["model"] or "unknown", "turn", "error"], row["n"])
    others = ModelCall.objects.values("model", "purpose").annotate(n=Count("id"), **token_sums)
    for row in others.order_by():
        calls.add_metric([row["model"] or "unknown", row["purpose"], "ok"], row["n"])
        add_tokens(row["model"], row)
    consulted = Consultation.objects.exclude(status=Consultation.Status.PENDING)
    consult_sums = {"input": Sum("input_tokens"), "output": Sum("output_tokens")}
    by_model = consulted.values("profile__model", "status").annotate(n=Count("id"), **consult_sums)
    for row in by_model.order_by():
        result = "ok" if row["status"] == Consultation.Status.DONE else "error"
        model = row["profile__model"] or "unknown"
        calls.add_metric([model, "consultation", result], row["n"])
        add_tokens(model, {**row, "cache_read": 0, "cache_creation": 0})
    for (model, kind), value in sorted(totals.items()):
        tokens.add_metric([model, kind], value)
    yield calls
    yield tokens


def _spend_and_tool_families():
    from teams.models import Team, TurnStep

    cost = CounterMetricFamily(
        "loom_cost_usd", "Money spent by each team (USD), by team slug.", labels=["team"]
    )
    for slug, spent in Team.objects.values_list("slug", "spent_usd").order_by("slug"):
        cost.add_metric([slug], float(spent or 0))
    yield cost

    tool_calls = CounterMetricFamily(
        "loom_tool_calls",
        "Tool calls of agents, by tool and result.",
        labels=["tool", "result"],
    )
    tool_steps = TurnStep.objects.filter(kind=TurnStep.Kind.TOOL)
    for row in (
        tool_steps.values("tool_name")
        .annotate(n=Count("id"), errors=Count("id", filter=Q(content__0__is_error=True)))
        .order_by()
    ):
        tool_calls.add_metric([row["tool_name"], "ok"], row["n"] - row["errors"])
        tool_calls.add_metric([row["tool_name"], "error"], row["errors"])
    yield tool_calls


def _queue_families(now: datetime, live: list[str], live_sockets: int | None):
    from teams.models import Turn

    S = Turn.Status
    queued = Turn.objects.filter(status=S.QUEUED).aggregate(n=Count("id"), oldest=Min("queued_at"))
    yield GaugeMetricFamily("loom_turns_queued", "Turns waiting for a worker.", queued["n"])
    yield GaugeMetricFamily(
        "loom_queue_oldest_age_seconds",
        "How long the oldest queued turn has waited (0 when none is queued).",
        _age(now, queued["oldest"]),
    )
    counts = dict(
        Turn.objects.filter(status__in=[S.RUNNING, S.WAITING])
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
    )
    yield GaugeMetricFamily("loom_turns_running", "Turns running now.", counts.get(S.RUNNING, 0))
    yield GaugeMetricFamily(
        "loom_turns_waiting",
        "Turns stopped at a tool call waiting for the PM's approval.",
        counts.get(S.WAITING, 0),
    )
    yield GaugeMetricFamily("loom_workers_live", "Turn workers with a recent heartbeat.", len(live))
    if live_sockets is not None:
        yield GaugeMetricFamily(
            "loom_live_sockets",
            "Live WebSockets (team pages and PM inboxes) of every process.",
            live_sockets,
        )


def _pm_request_families(now: datetime):
    from teams.models import PMRequest

    open_requests = GaugeMetricFamily(
        "loom_pm_requests_open", "PM requests waiting for an answer, by kind.", labels=["kind"]
    )
    oldest_request = GaugeMetricFamily(
        "loom_pm_request_oldest_age_seconds",
        "How long the oldest open PM request of each kind has waited.",
        labels=["kind"],
    )
    rows = {
        row["kind"]: row
        for row in PMRequest.objects.filter(status=PMRequest.Status.OPEN)
        .values("kind")
        .annotate(n=Count("id"), oldest=Min("created_at"))
        .order_by()
    }
    for kind in PMRequest.Kind.values:
        row = rows.get(kind, {"n": 0, "oldest": None})
        open_requests.add_metric([kind], row["n"])
        oldest_request.add_metric([kind], _age(now, row["oldest"]))
    yield open_requests
    yield oldest_request


def _integration_families():
    from teams.models import McpServer, WebhookDelivery

    deliveries = CounterMetricFamily(
        "loom_webhook_deliveries",
        "Webhook deliveries, by status (pending and delivering are not done yet).",
        labels=["status"],
    )
    by_status = dict(
        WebhookDelivery.objects.values_list("status").annotate(n=Count("id")).order_by()
    )
    for status in WebhookDelivery.Status.values:
        deliveries.add_metric([status], by_status.get(status, 0))
    yield deliveries

    mcp = GaugeMetricFamily(
        "loom_mcp_server_up",
        "1 when the MCP server's last contact succeeded, 0 when it failed; by team slug "
        "and server name.",
        labels=["team", "server"],
    )
    servers = McpServer.objects.values_list("team__slug", "name", "error").order_by(
        "team__slug", "name"
    )
    for slug, name, error in servers:
        mcp.add_metric([slug, name], 0 if error else 1)
    yield mcp


class _Local:
    """This process's own measurements (or the host's, in multiprocess mode)."""

    def collect(self):
        if MULTIPROCESS:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            yield from registry.collect()
        else:
            yield from LOCAL.collect()


def exposition(live_sockets: int | None = None) -> tuple[bytes, str]:
    """The metrics in the Prometheus text format, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(live_sockets))
    registry.register(_Local())
    return generate_latest(registry), CONTENT_TYPE_LATEST
