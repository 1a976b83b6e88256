"""Heartbeat leases and /healthz: a running turn's short lease is renewed while its
thread lives, a turn nobody runs any more is re-queued within a lease, and /healthz
tells an operator (or a load balancer) whether turns will get run."""

import os
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from teams.engine import worker
from teams.models import Turn, WorkerHeartbeat
from teams.run import team_actions

pytestmark = pytest.mark.django_db


def claimed(team, name="w1"):
    team_actions.team_start(team=team)
    turn = Turn.objects.get(team=team, status="queued")
    from teams.run import turns

    return turns.turn_claim(turn.id, name)


def test_a_claimed_turn_has_a_short_lease(team, settings):
    settings.LOOM_TURN_LEASE = 20
    turn = claimed(team)
    left = (turn.lease_expires_at - timezone.now()).total_seconds()
    assert 15 < left <= 20


def test_the_heartbeat_renews_running_turns_and_lets_an_orphan_expire(team, other_team):
    running = claimed(team, "w1")
    orphan = claimed(other_team, "w1")  # claimed here, but its thread died
    past = timezone.now() - timedelta(seconds=1)
    Turn.objects.filter(pk__in=[running.pk, orphan.pk]).update(lease_expires_at=past)
    worker._running[running.pk] = "w1"
    try:
        assert worker.Heartbeat("w1").beat() == 1
    finally:
        worker._running.pop(running.pk)
    assert worker.sweep()["requeued"] == 1
    running.refresh_from_db()
    orphan.refresh_from_db()
    assert running.status == "running" and running.lease_expires_at > timezone.now()
    assert orphan.status == "queued" and orphan.claimed_by == ""
    beat = WorkerHeartbeat.objects.get(worker="w1")
    assert beat.running_turns == 1 and beat.last_seen > past


def healthz():
    response = Client().get("/healthz")
    return response.status_code, response.json()


def test_healthz_is_open_and_says_what_is_running(team, settings):
    status, body = healthz()
    assert status == 200, body
    assert body["database"] == "ok" and body["channel_layer"] == "ok"
    # A live worker here is another test's leftover (a child process beating into this
    # database after its test's flush): the rows say whose, by pid and start.
    leftovers = list(WorkerHeartbeat.objects.values_list("worker", "started_at", "last_seen"))
    assert body["workers"]["live"] == 0, leftovers
    assert body["turns"]["queued"] == 0

    team_actions.team_start(team=team)  # a turn queued, and no worker to run it
    status, body = healthz()
    assert status == 503 and body["turns"]["queued"] == 1
    assert "no worker is live" in " ".join(body["problems"])
    assert team.slug not in str(body) and "Alpha" not in str(body)

    worker.Heartbeat("host:1:abc").beat()
    status, body = healthz()
    assert status == 200, body
    assert body["workers"] == {"live": 1, "ids": ["host:1:abc"], "running_turns": 0}

    Turn.objects.filter(team=team).update(queued_at=timezone.now() - timedelta(minutes=5))
    status, body = healthz()
    assert status == 503 and body["turns"]["oldest_queued_age_seconds"] >= 299


def test_a_worker_silent_for_two_leases_is_not_live(team, settings):
    settings.LOOM_TURN_LEASE = 10
    worker.Heartbeat("gone:1:abc").beat()
    WorkerHeartbeat.objects.update(last_seen=timezone.now() - timedelta(seconds=21))
    assert healthz()[1]["workers"]["live"] == 0


def test_healthz_says_503_when_the_channel_layer_fails(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    try:
        status, body = healthz()
    finally:
        channel_layers.backends.clear()
    assert status == 503 and body["channel_layer"] == "error" and body["database"] == "ok"


@pytest.mark.parametrize(
    "backend",
    ["channels_redis.core.RedisChannelLayer", "channels_redis.pubsub.RedisPubSubChannelLayer"],
)
@pytest.mark.skipif(
    not os.environ.get("LOOM_TEST_REDIS_URL"), reason="needs Redis (LOOM_TEST_REDIS_URL)"
)
def test_the_channel_layer_round_trip_passes_on_either_redis_layer(settings, backend):
    """The pub/sub layer delivers only to a reader already subscribed: /healthz's round
    trip reads on a channel the layer made (and subscribed to) first."""
    from channels.layers import channel_layers

    from teams.observability import health

    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": backend, "CONFIG": {"hosts": [os.environ["LOOM_TEST_REDIS_URL"]]}}
    }
    channel_layers.backends.clear()
    try:
        assert health._channel_layer_ok()
    finally:
        channel_layers.backends.clear()


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_wake_up_leaves_the_running_turn_renewed(team):
    """A second wake-up of a turn this process runs must not take it off the heartbeat:
    its lease would lapse and the sweeper re-queue a turn that is still running."""
    running = claimed(team, worker.WORKER_ID)
    worker._running[running.pk] = worker.WORKER_ID  # its thread runs it
    try:
        assert worker.run_claimed_turn(running.pk) is None  # the duplicate: nothing to run
        past = timezone.now() - timedelta(seconds=1)
        Turn.objects.filter(pk=running.pk).update(lease_expires_at=past)
        assert worker.Heartbeat().beat() == 1
    finally:
        worker._running.pop(running.pk, None)
    assert worker.sweep()["requeued"] == 0
    running.refresh_from_db()
    assert running.status == "running" and running.lease_expires_at > timezone.now()
