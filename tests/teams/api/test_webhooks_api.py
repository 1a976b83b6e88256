"""The webhooks API: a PM makes, lists and deletes a team's webhooks and reads each
one's delivery log; the secret is in the creation's answer only; hostile input is a
clear 4xx that stores nothing; another PM's team is as absent as a missing one."""

import pytest

from teams.conversation import pm_requests
from teams.engine import deliveries
from teams.integrations import webhooks
from teams.models import Webhook, WebhookDelivery
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import ApiClient, api_token, state

pytestmark = pytest.mark.django_db

HOOK = {"url": "https://hooks.example.test/loom", "events": ["pm_request.opened", "team.done"]}


@pytest.fixture
def pm_api(pm):
    """The PM of alpha, with an account token."""
    return ApiClient(api_token(user=pm, label="pm scripts"))


def test_a_pm_makes_lists_and_deletes_a_webhook(pm_api, team):
    made = pm_api.post("/teams/alpha/webhooks", HOOK)
    assert made.status_code == 201, made.content
    body = made.json()
    secret = body["secret"]
    assert secret.startswith("whsec_") and body["secret_prefix"] == secret[:10]
    assert body["url"] == HOOK["url"] and body["events"] == HOOK["events"]
    assert body["enabled"] is True

    listed = pm_api.get("/teams/alpha/webhooks")
    assert listed.status_code == 200
    assert [w["id"] for w in listed.json()] == [body["id"]]
    assert "secret" not in listed.json()[0] and secret not in listed.content.decode()

    assert pm_api.delete(f"/teams/alpha/webhooks/{body['id']}").status_code == 204
    assert pm_api.get("/teams/alpha/webhooks").json() == []
    gone = pm_api.delete(f"/teams/alpha/webhooks/{body['id']}")
    assert gone.status_code == 404
    assert gone.json() == {"detail": f"Team 'alpha' has no webhook {body['id']}."}


def test_the_secret_from_the_api_verifies_what_the_receiver_gets(
    pm_api, team, agents, loopback_allowed
):
    with WebhookReceiver() as hook:
        made = pm_api.post(
            "/teams/alpha/webhooks", {"url": hook.url, "events": ["pm_request.opened"]}
        ).json()
        hook.secret = made["secret"]
        pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
        deliveries.deliver_due()
    assert len(hook.verified) == 1
    log = pm_api.get(f"/teams/alpha/webhooks/{made['id']}/deliveries").json()
    (delivery,) = log["deliveries"]
    assert delivery["status"] == "delivered" and delivery["attempts"] == 1
    assert delivery["last_status_code"] == 200 and delivery["event"] == "pm_request.opened"
    assert delivery["payload"]["data"]["question"] == "Scope?"
    assert str(delivery["id"]) == hook.requests[0].delivery_id


def test_the_delivery_log_pages_oldest_first(pm_api, team):
    webhook, _ = webhooks.webhook_create(team=team, url=HOOK["url"], events=["team.failed"])
    for n in range(5):
        webhooks.webhooks_notify(team=team, event="team.failed", payload={"n": n})
    path = f"/teams/alpha/webhooks/{webhook.id}/deliveries"
    first = pm_api.get(path, limit=3).json()
    assert [d["payload"]["data"]["n"] for d in first["deliveries"]] == [0, 1, 2]
    assert first["has_more"] is True
    rest = pm_api.get(path, limit=3, after=first["next_after"]).json()
    assert [d["payload"]["data"]["n"] for d in rest["deliveries"]] == [3, 4]
    assert rest["has_more"] is False
    assert [d["status"] for d in rest["deliveries"]] == ["pending", "pending"]
    assert pm_api.get(path, status="failed").json()["deliveries"] == []


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({**HOOK, "url": "ftp://hooks.example.test/x"}, "url"),
        ({**HOOK, "url": "javascript:alert(1)"}, "url"),
        ({**HOOK, "url": "http://"}, "url"),
        ({**HOOK, "url": "https://hooks.example.test/\x00"}, "url"),
        ({**HOOK, "events": ["team.deleted"]}, "events"),
        ({**HOOK, "events": []}, "events"),
        ({**HOOK, "events": ["team.done", "team.done"]}, "events"),
        ({**HOOK, "secret": "mine"}, "secret"),
    ],
)
def test_hostile_input_is_a_422_naming_the_field_and_stores_nothing(pm_api, team, body, loc):
    before = state()
    response = pm_api.post("/teams/alpha/webhooks", body)
    assert response.status_code == 422, response.content
    assert loc in response.json()["detail"][0]["loc"]
    assert response.json()["detail"][0]["msg"]
    assert state() == before


def test_a_second_webhook_to_the_same_url_is_a_409(pm_api, team):
    assert pm_api.post("/teams/alpha/webhooks", HOOK).status_code == 201
    again = pm_api.post("/teams/alpha/webhooks", {**HOOK, "events": ["team.done"]})
    assert again.status_code == 409
    assert "already has a webhook to" in again.json()["detail"]
    assert Webhook.objects.count() == 1


def test_another_pms_team_is_as_absent_as_a_missing_one(pm_api, team, other_team, other_pm):
    theirs, _ = webhooks.webhook_create(team=other_team, url=HOOK["url"], events=["team.done"])
    before = state()
    for method, path, body in [
        ("post", "/teams/beta/webhooks", HOOK),
        ("get", "/teams/beta/webhooks", None),
        ("delete", f"/teams/beta/webhooks/{theirs.id}", None),
        ("get", f"/teams/beta/webhooks/{theirs.id}/deliveries", None),
    ]:
        response = getattr(pm_api, method)(path, *([body] if body is not None else []))
        assert response.status_code == 404, (method, path)
        assert response.json() == {"detail": "No team with slug 'beta'."}
    # Alpha's PM naming beta's webhook under alpha: no such webhook of alpha.
    response = pm_api.delete(f"/teams/alpha/webhooks/{theirs.id}")
    assert response.status_code == 404
    assert state() == before


def test_an_agents_token_cannot_see_or_make_webhooks(agents, team):
    coder = ApiClient(api_token(agent=agents["coder"]))
    for response in (
        coder.get("/teams/alpha/webhooks"),
        coder.post("/teams/alpha/webhooks", HOOK),
    ):
        assert response.status_code == 403
        assert "acts only as agent 'coder'" in response.json()["detail"]
    assert not Webhook.objects.exists() and not WebhookDelivery.objects.exists()


def test_a_team_token_cannot_see_make_or_delete_webhooks(api, pm_api, team):
    """A leaked team token must neither send the team's events elsewhere nor learn
    where they go (the URLs) and what was sent (the deliveries): issue 22."""
    made = pm_api.post("/teams/alpha/webhooks", HOOK).json()
    for response in (
        api.get("/teams/alpha/webhooks"),
        api.get(f"/teams/alpha/webhooks/{made['id']}/deliveries"),
        api.post("/teams/alpha/webhooks", {**HOOK, "url": "http://127.0.0.1:9/elsewhere"}),
        api.delete(f"/teams/alpha/webhooks/{made['id']}"),
    ):
        assert response.status_code == 403
        assert "A team token cannot" in response.json()["detail"]
        assert "hooks.example.test" not in response.content.decode()
    # The PM's account token (and a staff session) sees them as before.
    assert [w["url"] for w in pm_api.get("/teams/alpha/webhooks").json()] == [HOOK["url"]]
    assert list(Webhook.objects.values_list("id", flat=True)) == [made["id"]]


def test_a_pm_rotates_the_secret_and_only_the_new_one_verifies(
    pm_api, api, team, agents, loopback_allowed
):
    with WebhookReceiver() as hook:
        made = pm_api.post(
            "/teams/alpha/webhooks", {"url": hook.url, "events": ["pm_request.opened"]}
        ).json()
        old = made["secret"]
        pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Queued before?")

        rotated = pm_api.post(f"/teams/alpha/webhooks/{made['id']}/rotate-secret")
        assert rotated.status_code == 200, rotated.content
        new = rotated.json()["secret"]
        assert new.startswith("whsec_") and new != old
        assert rotated.json()["secret_prefix"] == new[:10] and rotated.json()["id"] == made["id"]
        listed = pm_api.get("/teams/alpha/webhooks")
        assert new not in listed.content.decode()  # shown once
        assert listed.json()[0]["secret_prefix"] == new[:10]

        hook.secret = old  # the queued delivery is signed with the new secret
        deliveries.deliver_due()
        assert [r.signature_ok for r in hook.requests] == [False]
        hook.secret = new
        delivery = WebhookDelivery.objects.get()
        deliveries.deliver_due(now=delivery.next_attempt_at)
        assert [r.signature_ok for r in hook.requests] == [False, True]


def test_rotating_takes_the_teams_pm_in_person(pm_api, api, team, other_team, other_pm):
    made = pm_api.post("/teams/alpha/webhooks", HOOK).json()
    theirs = ApiClient(api_token(user=other_pm, label="bob's"))
    before = state()
    refused = api.post(f"/teams/alpha/webhooks/{made['id']}/rotate-secret")  # a team token
    assert refused.status_code == 403 and "A team token cannot" in refused.json()["detail"]
    assert theirs.post(f"/teams/alpha/webhooks/{made['id']}/rotate-secret").status_code == 404
    assert pm_api.post("/teams/alpha/webhooks/999999/rotate-secret").status_code == 404
    assert state() == before
