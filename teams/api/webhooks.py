"""A team's webhooks (the PM's): list, create (the secret shown once), rotate the
secret (the new one shown once), delete, and each webhook's delivery log."""

from ninja import Query, Router, Status

from teams.api.auth import caller
from teams.api.paging import MAX_ID, Limit, page_of
from teams.api.schemas.common import responses
from teams.api.schemas.webhooks import (
    WebhookCreatedOut,
    WebhookDeliveryOut,
    WebhookDeliveryPage,
    WebhookIn,
    WebhookOut,
)
from teams.errors import NotFound
from teams.integrations import webhooks
from teams.models import Team, Webhook, WebhookDeliveryStatus

router = Router(tags=["webhooks"])


def _pm_team(request, team: str, doing: str) -> Team:
    """The team, for its PM; everything about webhooks takes a person too (a staff
    session or an account token): a leaked team token must neither send the team's
    events elsewhere nor learn where they go and what was sent."""
    who = caller(request)
    row = who.team(team)
    who.require_pm(doing)
    who.require_person(doing)
    return row


def _webhook(team: Team, webhook_id: int) -> Webhook:
    webhook = team.webhooks.filter(pk=webhook_id).first() if 0 < webhook_id <= MAX_ID else None
    if webhook is None:
        raise NotFound(f"Team {team.slug!r} has no webhook {webhook_id}.")
    return webhook


@router.get(
    "/teams/{team}/webhooks",
    response=responses({200: list[WebhookOut]}, 404),
    operation_id="webhooks_list",
)
def webhooks_list(request, team: str):
    """The team's webhooks (never their secrets), oldest first."""
    row = _pm_team(request, team, "see the team's webhooks")
    return [WebhookOut.model_validate(w) for w in row.webhooks.order_by("id")]


@router.post(
    "/teams/{team}/webhooks",
    response=responses({201: WebhookCreatedOut}, 400, 404, 409),
    operation_id="webhooks_create",
)
def webhooks_create(request, team: str, payload: WebhookIn):
    """A new webhook: the events are POSTed to the URL, signed with its secret, which is
    in this response only (Loom keeps it encrypted, to sign with)."""
    row = _pm_team(request, team, "make webhooks")
    webhook, secret = webhooks.webhook_create(
        team=row, url=payload.url, events=list(payload.events), enabled=payload.enabled
    )
    return Status(
        201, WebhookCreatedOut(**WebhookOut.model_validate(webhook).model_dump(), secret=secret)
    )


@router.post(
    "/teams/{team}/webhooks/{webhook_id}/rotate-secret",
    response=responses({200: WebhookCreatedOut}, 404),
    operation_id="webhooks_rotate_secret",
)
def webhooks_rotate_secret(request, team: str, webhook_id: int):
    """A new secret for the webhook, in this response only: every delivery from now on
    (queued ones and retries included) is signed with it; the old one verifies nothing
    more. Takes a person, as making a webhook does."""
    row = _pm_team(request, team, "rotate webhook secrets")
    webhook, secret = webhooks.webhook_secret_rotate(webhook=_webhook(row, webhook_id))
    return WebhookCreatedOut(**WebhookOut.model_validate(webhook).model_dump(), secret=secret)


@router.delete(
    "/teams/{team}/webhooks/{webhook_id}",
    response=responses({204: None}, 404),
    operation_id="webhooks_delete",
)
def webhooks_delete(request, team: str, webhook_id: int):
    """Delete a webhook and its delivery log: nothing more is sent to it."""
    row = _pm_team(request, team, "delete webhooks")
    webhooks.webhook_delete(webhook=_webhook(row, webhook_id))
    return Status(204, None)


@router.get(
    "/teams/{team}/webhooks/{webhook_id}/deliveries",
    response=responses({200: WebhookDeliveryPage}, 404),
    operation_id="webhooks_deliveries",
)
def webhooks_deliveries(
    request,
    team: str,
    webhook_id: int,
    after: int = Query(0, ge=0, le=MAX_ID, description="Return what comes after this id."),
    limit: int = Limit,
    status: WebhookDeliveryStatus | None = None,
):
    """The webhook's deliveries, oldest first: event, status, attempts, the last
    answer or error, and the body sent."""
    row = _pm_team(request, team, "see the webhooks' deliveries")
    deliveries = webhooks.webhook_deliveries(webhook=_webhook(row, webhook_id)).filter(id__gt=after)
    if status is not None:
        deliveries = deliveries.filter(status=status)
    page, has_more = page_of(deliveries, limit)
    return WebhookDeliveryPage(
        deliveries=[WebhookDeliveryOut.model_validate(d) for d in page],
        next_after=page[-1].id if page else after,
        has_more=has_more,
    )
