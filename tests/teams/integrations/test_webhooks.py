"""Webhooks (teams/integrations/webhooks.py, teams/run/budgets.py, teams/engine/deliveries.py): the
PM's server on loopback gets each event once, signed with the webhook's secret,
retried with growing backoff while it fails or times out, and nothing is lost to a
restart or sent twice by two senders. Time is advanced with `now`, never slept."""

import json
import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from teams.conversation import pm_requests
from teams.engine import deliveries
from teams.errors import Conflict, InvalidInput
from teams.integrations import webhooks
from teams.models import Team, Turn, Webhook, WebhookDelivery
from teams.run import budgets, team_actions, turns
from tests.fakes.webhook_receiver import Answer, WebhookReceiver
from tests.helpers import client_for, make_team

# The receivers listen on loopback: the outbound guard is told to allow it.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

ALL_EVENTS = ["pm_request.opened", "team.done", "team.failed", "budget.warning"]


@pytest.fixture
def receiver():
    """Start a receiver with a script; it checks signatures with the secret the
    webhook made for it (`hooked`)."""
    started = []

    def start(script=None):
        hook = WebhookReceiver(script).__enter__()
        started.append(hook)
        return hook

    yield start
    for hook in started:
        hook.__exit__(None, None, None)


def hooked(team, hook, events=ALL_EVENTS) -> Webhook:
    """A webhook of `team` to the receiver, which learns its secret (shown once)."""
    webhook, secret = webhooks.webhook_create(team=team, url=hook.url + "/loom", events=events)
    hook.secret = secret
    return webhook


def only_delivery() -> WebhookDelivery:
    (delivery,) = WebhookDelivery.objects.all()
    return delivery


def finish_turn(team, text="Done."):
    """The team's queued turn, claimed and finished as a worker would (no model)."""
    queued = Turn.objects.get(team=team, status=Turn.Status.QUEUED)
    turn = turns.turn_claim(queued.id, "test-worker")
    turns.turn_finish(turn=turn, worker="test-worker", text=text)


def test_a_pm_request_reaches_the_pms_server_signed(team, agents, receiver):
    hook = receiver()
    webhook = hooked(team, hook)
    other, _ = webhooks.webhook_create(team=team, url=hook.url + "/done-only", events=["team.done"])
    off, _ = webhooks.webhook_create(team=team, url=hook.url + "/off", events=ALL_EVENTS)
    off.enabled = False
    webhooks.webhook_update(webhook=off, fields=["enabled"])

    request = pm_requests.pm_request_open(team=team, agent=agents["coach"], question="HTML or PDF?")
    assert deliveries.deliver_due() == {"delivered": 1, "retrying": 0, "failed": 0}

    (got,) = hook.requests
    assert got.signature_ok, "the receiver verified the signature with the webhook's secret"
    delivery = only_delivery()
    assert delivery.webhook == webhook  # not the done-only webhook, nor the disabled one
    assert got.event == "pm_request.opened"
    assert got.delivery_id == str(delivery.id)
    assert got.headers["Content-Type"] == "application/json"
    body = got.body
    assert body["event"] == "pm_request.opened" and body["team"] == "alpha"
    assert body["data"]["question"] == "HTML or PDF?"
    assert body["data"]["id"] == request.id and body["data"]["agent"] == "coach"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert delivery.delivered_at is not None and delivery.next_attempt_at is None
    assert other.deliveries.count() == 0
    # Delivered is delivered: the next pass sends nothing.
    assert deliveries.deliver_due()["delivered"] == 0 and len(hook.requests) == 1


def test_a_signature_made_with_another_secret_does_not_verify(team, agents, receiver):
    hook = receiver()
    hooked(team, hook)
    hook.secret = "whsec_not-the-secret"
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    assert deliveries.deliver_due()["retrying"] == 1  # the receiver refused it (401)
    assert not hook.requests[0].signature_ok
    assert only_delivery().last_error.startswith("HTTP 401")


def test_a_receiver_failing_twice_gets_it_on_the_third_attempt_after_growing_waits(
    team, agents, receiver, settings
):
    settings.LOOM_WEBHOOK_BACKOFF = 10
    hook = receiver([Answer(500), Answer(503)])
    hooked(team, hook)
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    t0 = timezone.now()

    assert deliveries.deliver_due(now=t0)["retrying"] == 1
    first = only_delivery()
    assert (first.status, first.attempts, first.last_status_code) == ("pending", 1, 500)
    assert first.last_error == "HTTP 500"  # the status only, never the answer's body
    assert first.next_attempt_at == t0 + timedelta(seconds=10)

    assert deliveries.deliver_due(now=t0 + timedelta(seconds=9)) == {
        "delivered": 0,
        "retrying": 0,
        "failed": 0,
    }  # not due yet
    assert len(hook.requests) == 1

    t1 = t0 + timedelta(seconds=10)
    assert deliveries.deliver_due(now=t1)["retrying"] == 1
    second = only_delivery()
    assert (second.attempts, second.last_status_code) == (2, 503)
    assert second.next_attempt_at == t1 + timedelta(seconds=20)  # the wait doubled

    t2 = t1 + timedelta(seconds=20)
    assert deliveries.deliver_due(now=t2)["delivered"] == 1
    done = only_delivery()
    assert (done.status, done.attempts, done.last_status_code) == ("delivered", 3, 200)
    assert done.last_error == ""
    # Three requests, all signed and verified, one delivery id, byte-identical bodies.
    assert len(hook.verified) == 3
    assert {r.delivery_id for r in hook.requests} == {str(done.id)}
    assert len({r.raw for r in hook.requests}) == 1


def test_a_receiver_that_times_out_is_recorded_and_retried(team, agents, receiver, settings):
    settings.LOOM_WEBHOOK_TIMEOUT = 0.3
    hook = receiver([Answer(200, delay=3)])
    hooked(team, hook)
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    t0 = timezone.now()

    started = time.monotonic()
    assert deliveries.deliver_due(now=t0)["retrying"] == 1
    assert time.monotonic() - started < 2  # the sender did not wait for the receiver
    timed_out = only_delivery()
    assert (timed_out.status, timed_out.attempts) == ("pending", 1)
    assert timed_out.last_error == "Timed out after 0.3 s."
    assert timed_out.last_status_code is None

    assert deliveries.deliver_due(now=timed_out.next_attempt_at)["delivered"] == 1
    assert only_delivery().attempts == 2
    assert [r.signature_ok for r in hook.requests] == [True, True]


def test_a_receiver_that_is_down_is_retried_until_it_is_given_up(team, agents, settings):
    settings.LOOM_WEBHOOK_MAX_ATTEMPTS = 3
    with WebhookReceiver() as gone:  # a port that answered once and is closed now
        url = gone.url
    webhooks.webhook_create(team=team, url=url, events=ALL_EVENTS)
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    now = timezone.now()
    outcomes = []
    for _ in range(3):
        outcomes.append(deliveries.deliver_due(now=now))
        now = only_delivery().next_attempt_at or now
    assert [o["retrying"] for o in outcomes] == [1, 1, 0] and outcomes[2]["failed"] == 1
    failed = only_delivery()
    assert (failed.status, failed.attempts, failed.next_attempt_at) == ("failed", 3, None)
    assert failed.last_error.startswith("Gave up after 3 attempts. Last: Could not deliver")
    assert deliveries.deliver_due(now=now + timedelta(days=1))["failed"] == 0  # settled


def test_backoff_doubles_from_the_setting_and_stops_at_an_hour(settings):
    settings.LOOM_WEBHOOK_BACKOFF = 10
    waits = [webhooks.backoff(n).total_seconds() for n in (1, 2, 3, 4, 12)]
    assert waits == [10, 20, 40, 80, 3600]


def test_deliveries_survive_a_restart(team, agents, receiver):
    """Rows are the queue: what one process queued or was sending when it died, a
    fresh sender delivers."""
    hook = receiver()
    hooked(team, hook)
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    now = timezone.now()
    # A sender claims it and dies before sending (its process is gone).
    (due,) = webhooks.deliveries_due(now=now, limit=10)
    assert webhooks.delivery_claim(due, worker="dead", now=now, lease=deliveries.lease())
    assert only_delivery().status == "delivering"

    # A fresh process: nothing while the dead sender's lease runs, then it is sent.
    assert deliveries.deliver_due(now=now, worker="fresh")["delivered"] == 0
    after_lease = now + deliveries.lease()
    assert deliveries.deliver_due(now=after_lease, worker="fresh")["delivered"] == 1
    delivered = only_delivery()
    assert (delivered.status, delivered.attempts, delivered.claimed_by) == (
        "delivered",
        2,
        "fresh",
    )
    assert len(hook.verified) == 1


@pytest.mark.django_db(transaction=True)
def test_two_senders_at_once_send_each_delivery_once(receiver):
    team = make_team("alpha")
    hook = receiver([Answer(200, delay=0.05) for _ in range(5)])
    hooked(team, hook)
    for n in range(5):
        webhooks.webhooks_notify(team=team, event="team.failed", payload={"n": n})
    start = threading.Barrier(2)
    results = []

    def sender(name):
        try:
            start.wait()
            results.append(deliveries.deliver_due(worker=name))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sender, args=(f"sender-{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sum(r["delivered"] for r in results) == 5
    assert len(hook.requests) == 5  # no delivery was POSTed twice
    assert len({r.delivery_id for r in hook.requests}) == 5
    assert sorted(r.body["data"]["n"] for r in hook.verified) == [0, 1, 2, 3, 4]
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"}


def test_budget_warning_fires_once_at_80_percent_of_the_turns(team, receiver):
    hook = receiver()
    hooked(team, hook, events=["budget.warning"])
    Team.objects.filter(pk=team.pk).update(max_turns=5)
    team_actions.team_start(team=team)
    for _ in range(3):
        finish_turn(team)
    assert not WebhookDelivery.objects.exists()  # 3 of 5 turns: 60%
    finish_turn(team)  # 4 of 5: 80%
    finish_turn(team)  # 5 of 5: the budget is reached and the team paused, no second warning
    team.refresh_from_db()
    assert team.status == "paused" and team.turn_count == 5
    warning = only_delivery()
    assert warning.event == "budget.warning"
    assert warning.payload["data"] == {"budget": "turns", "used": 4, "limit": 5, "percent": 80.0}
    assert team.turns_warned_at is not None and team.cost_warned_at is None
    assert deliveries.deliver_due()["delivered"] == 1
    assert hook.verified[0].body["data"]["budget"] == "turns"


def test_budget_warning_fires_once_at_80_percent_of_the_cost(team, receiver):
    hooked(team, receiver(), events=["budget.warning"])
    Team.objects.filter(pk=team.pk).update(max_cost_usd=Decimal("2"))
    for spent, warned in (("1.50", []), ("1.60", ["cost"]), ("1.90", []), ("2.50", [])):
        Team.objects.filter(pk=team.pk).update(spent_usd=Decimal(spent))
        assert budgets.budget_check(Team.objects.get(pk=team.pk)) == warned
    warning = only_delivery()
    assert warning.payload["data"] == {"budget": "cost", "used": 1.6, "limit": 2.0, "percent": 80.0}


def test_the_team_finishing_and_a_failed_turn_queue_their_events(receiver):
    hook = receiver()
    team = make_team("solo", phases=["only"])
    hooked(team, hook)
    coach = team.agents.get(name="coach")
    team_actions.team_start(team=team)
    queued = Turn.objects.get(team=team, status=Turn.Status.QUEUED)
    turn = turns.turn_claim(queued.id, "test-worker")
    turns.turn_fail(turn=turn, worker="test-worker", error="HTTP 400 from the model")
    team.refresh_from_db()
    assert team.status == "paused"
    failed = only_delivery()
    assert failed.event == "team.failed"
    assert failed.payload["data"]["error"] == "HTTP 400 from the model"
    assert failed.payload["data"]["agent"] == turn.agent.name
    assert failed.payload["data"]["status"] == "paused"

    team_actions.team_resume(team=team)
    team_actions.phase_complete(team=team, agent=coach, summary="Shipped the parser.")
    team.refresh_from_db()
    assert team.status == "done"
    done = WebhookDelivery.objects.get(event="team.done")
    assert done.payload["data"]["summary"] == "Shipped the parser."
    assert done.payload["data"]["phase"] == "only"

    assert deliveries.deliver_due()["delivered"] == 2
    # Both arrive, verified; deliveries go several at once, so in either order.
    assert sorted(r.event for r in hook.verified) == ["team.done", "team.failed"]


def test_a_refused_change_queues_nothing(team, agents, receiver):
    """The deliveries are rows of the change's own transaction: no change, no event."""
    hooked(team, receiver())
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    with pytest.raises(Conflict):
        pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Again?")
    assert WebhookDelivery.objects.count() == 1


@pytest.mark.parametrize(
    ("url", "events", "field"),
    [
        ("ftp://hooks.example.test/x", ["team.done"], "url"),
        ("javascript:alert(1)", ["team.done"], "url"),
        ("file:///etc/passwd", ["team.done"], "url"),
        ("https://", ["team.done"], "url"),
        ("https://hooks.example.test:99999/x", ["team.done"], "url"),
        ("https://hooks.example.test/a b", ["team.done"], "url"),
        ("", ["team.done"], "url"),
        ("https://hooks.example.test/x", ["team.deleted"], "events"),
        ("https://hooks.example.test/x", [], "events"),
        ("https://hooks.example.test/x", ["team.done", "team.done"], "events"),
    ],
)
def test_hostile_webhooks_are_refused_and_nothing_is_stored(team, url, events, field):
    with pytest.raises(InvalidInput) as refused:
        webhooks.webhook_create(team=team, url=url, events=events)
    assert refused.value.field == field
    assert refused.value.message  # says what is accepted
    assert not Webhook.objects.exists()


def test_a_second_webhook_to_the_same_url_is_a_conflict(team):
    webhooks.webhook_create(team=team, url="https://hooks.example.test/x", events=["team.done"])
    with pytest.raises(Conflict, match="already has a webhook to"):
        webhooks.webhook_create(team=team, url="https://hooks.example.test/x", events=ALL_EVENTS)
    assert Webhook.objects.count() == 1


def test_the_secret_is_stored_encrypted_and_never_recorded(team, agents, receiver, settings):
    hook = receiver([Answer(500)])
    webhook = hooked(team, hook)
    secret = hook.secret
    assert secret.startswith("whsec_") and len(secret) > 40
    stored = Webhook.objects.filter(pk=webhook.pk).values()[0]
    assert secret not in json.dumps(stored, default=str)
    assert webhook.secret_prefix == secret[:10]
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    deliveries.deliver_due()
    delivery = only_delivery()
    assert secret not in delivery.last_error and secret not in json.dumps(delivery.payload)
    # Another SECRET_KEY cannot read it: the delivery says why, and still leaks nothing.
    settings.SECRET_KEY = "another-key-entirely"
    deliveries.deliver_due(now=delivery.next_attempt_at)
    delivery.refresh_from_db()
    assert "LOOM_SECRET_KEY changed" in delivery.last_error
    assert len(hook.requests) == 1
    # The old key as a fallback reads it again.
    settings.SECRET_KEY_FALLBACKS = ["loom-test-suite-key-not-a-secret"]
    assert webhooks.webhook_secret(webhook) == secret


# --- the admin -------------------------------------------------------------------


@pytest.fixture
def pm_in_group(pm):
    from teams.management.commands.loom_demo import pm_group_ensure

    pm.groups.add(pm_group_ensure())
    return pm


def test_a_pm_makes_a_webhook_in_the_admin_and_sees_its_secret_once(
    pm_in_group, team, other_team, agents, receiver
):
    hook = receiver()
    client = client_for(pm_in_group)
    response = client.post(
        reverse("admin:teams_webhook_add"),
        {
            "team": team.pk,
            "url": hook.url + "/loom",
            "events": ["pm_request.opened"],
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "shown only this once" in page
    hook.secret = response.context["secret"]
    assert '<code id="webhook-secret"' in page and hook.secret in page
    webhook = Webhook.objects.get()
    assert webhook.events == ["pm_request.opened"]
    # The secret is on no other page.
    change = client.get(reverse("admin:teams_webhook_change", args=[webhook.pk]))
    assert hook.secret not in change.content.decode()
    assert webhook.secret_prefix in change.content.decode()

    # It works: the receiver verifies what it gets with that secret.
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    deliveries.deliver_due()
    assert len(hook.verified) == 1

    # Another PM's team cannot be chosen; nothing is stored.
    refused = client.post(
        reverse("admin:teams_webhook_add"),
        {"team": other_team.pk, "url": "https://hooks.example.test/x", "events": ["team.done"]},
    )
    assert "team" in refused.context["adminform"].form.errors
    bad = client.post(
        reverse("admin:teams_webhook_add"),
        {"team": team.pk, "url": "gopher://hooks.example.test/", "events": ["team.done"]},
    )
    assert "url" in bad.context["adminform"].form.errors
    assert Webhook.objects.count() == 1


def test_the_delivery_log_shows_seconds_and_sends_a_failed_delivery_again(
    pm_in_group, team, agents, receiver, settings
):
    settings.LOOM_WEBHOOK_MAX_ATTEMPTS = 1
    hook = receiver([Answer(500)])
    hooked(team, hook)
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    assert deliveries.deliver_due()["failed"] == 1
    failed = only_delivery()
    client = client_for(pm_in_group)
    log = client.get(reverse("admin:teams_webhookdelivery_changelist")).content.decode()
    assert "pm_request.opened" in log and "Gave up after 1 attempts" in log
    assert timezone.localtime(failed.created_at).strftime("%H:%M:%S") in log

    client.post(
        reverse("admin:teams_webhookdelivery_changelist"),
        {"action": "send_again", "_selected_action": [failed.pk]},
    )
    requeued = only_delivery()
    assert (requeued.status, requeued.attempts) == ("pending", 0)
    assert deliveries.deliver_due()["delivered"] == 1
    assert len(hook.verified) == 2
    # A delivered one is not sent again.
    with pytest.raises(Conflict, match="only a failed delivery"):
        webhooks.delivery_retry(delivery=only_delivery())


# --- running beside the sweeper ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_deliverer_thread_sends_what_a_change_queued_without_waiting_for_its_poll(
    receiver,
):
    team = make_team("alpha")
    hook = receiver()
    hooked(team, hook)
    stop = threading.Event()
    thread = deliveries.start_thread(interval=60, stop=stop)  # a poll a minute away
    try:
        pm_requests.pm_request_open(
            team=team, agent=team.agents.get(name="coach"), question="Scope?"
        )
        deadline = time.monotonic() + 10
        while not hook.verified and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        webhooks.DUE.set()
        thread.join(10)
    assert len(hook.verified) == 1
    assert WebhookDelivery.objects.get().status == "delivered"


def test_sweep_once_delivers_what_is_due(team, agents, receiver, capsys):
    from django.core.management import call_command

    hook = receiver()
    hooked(team, hook)
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    call_command("sweep", "--once")
    assert "webhooks delivered 1, retrying 0, failed 0" in capsys.readouterr().out
    assert len(hook.verified) == 1


def test_a_pm_rotates_a_webhooks_secret_in_the_admin_and_sees_it_once(pm_in_group, team):
    webhook, old = webhooks.webhook_create(
        team=team, url="https://hooks.example.test/loom", events=ALL_EVENTS
    )
    client = client_for(pm_in_group)
    page = client.post(
        reverse("admin:teams_webhook_changelist"),
        {"action": "rotate_secret", "_selected_action": [webhook.pk]},
    )
    assert page.status_code == 200
    new = page.context["secret"]
    assert new != old and "has a new secret" in page.content.decode()
    assert "shown only this once" in page.content.decode()
    assert webhooks.webhook_secret(Webhook.objects.get()) == new
    assert Webhook.objects.get().secret_prefix == new[:10]
    change = client.get(reverse("admin:teams_webhook_change", args=[webhook.pk]))
    assert new not in change.content.decode()
