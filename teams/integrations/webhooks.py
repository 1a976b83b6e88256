"""Webhooks: a team's events POSTed to the PM's own URLs, signed, retried from the
database.

A webhook names a URL and the events it wants (models.WebhookEvent). When one of
them happens, `webhooks_notify` writes one WebhookDelivery per matching enabled
webhook in the transaction of the change itself: the row exists exactly when the
change does, so a crash or a restart loses no delivery. The engine
(teams.engine.deliveries) claims due rows with the conditional updates below, POSTs
them and records the outcome here; a failure is retried with exponential backoff
until LOOM_WEBHOOK_MAX_ATTEMPTS.

Each webhook has its own secret (the receiver checks the HMAC-SHA256 signature with
it). Loom must sign with it, so it cannot keep only a hash as it does for API
tokens: it keeps it encrypted (Fernet) with a key derived from SECRET_KEY (or one of
SECRET_KEY_FALLBACKS), and shows it once, when the webhook is made."""

from __future__ import annotations

import base64
import secrets
import threading
from datetime import datetime, timedelta

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django.utils.crypto import salted_hmac

from teams import services
from teams.errors import Conflict, InvalidInput, NotFound, integrity_as, validated
from teams.models import Team, Webhook, WebhookDelivery, WebhookEvent
from teams.run import locks

SECRET_PREFIX = "whsec_"
KEY_SALT = "loom.webhooks.secret-encryption"
MAX_WEBHOOKS_PER_TEAM = 20
WEBHOOK_SETTINGS = ("url", "events", "enabled")
MAX_BACKOFF = timedelta(hours=1)
ERROR_LIMIT = 1000  # characters of an error kept on the row

# Set when this process queued deliveries: the deliverer thread wakes at once rather
# than at its next poll (other processes find the rows on their own poll).
DUE = threading.Event()

Status = WebhookDelivery.Status


# --- the secret ------------------------------------------------------------------


def _fernet() -> MultiFernet:
    """Encrypt with a key derived from SECRET_KEY; decrypt with it or a fallback key."""
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet(
        [
            Fernet(
                base64.urlsafe_b64encode(
                    salted_hmac(KEY_SALT, "fernet", secret=key, algorithm="sha256").digest()
                )
            )
            for key in keys
        ]
    )


def webhook_secret(webhook: Webhook) -> str:
    """The webhook's secret in plain, to sign with (never to show or log)."""
    try:
        return _fernet().decrypt(webhook.secret_encrypted.encode()).decode()
    except InvalidToken:
        raise Conflict(
            f"The secret of webhook {webhook.pk} cannot be decrypted: LOOM_SECRET_KEY changed "
            "since it was made. Delete the webhook and make it again (a new secret)."
        ) from None


# --- the webhooks --------------------------------------------------------------


def _url_check(url: str) -> str:
    url = (url or "").strip()
    if "\x00" in url or any(c.isspace() for c in url):
        raise InvalidInput("A webhook URL may not contain spaces or NUL characters.", field="url")
    return url


def _new_secret() -> tuple[str, str, str]:
    """(secret, stored encrypted, prefix shown to tell it)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    return secret, _fernet().encrypt(secret.encode()).decode(), secret[: len(SECRET_PREFIX) + 4]


@transaction.atomic
def webhook_create(
    *, team: Team, url: str, events: list[str], enabled: bool = True
) -> tuple[Webhook, str]:
    """A new webhook of the team and its secret, returned this once (stored encrypted)."""
    secret, encrypted, prefix = _new_secret()
    webhook = Webhook(
        team=team,
        url=_url_check(url),
        events=[str(e) for e in events] if isinstance(events, list | tuple) else events,
        enabled=enabled,
        secret_encrypted=encrypted,
        secret_prefix=prefix,
    )
    validated(webhook, exclude=["team", "secret_encrypted", "secret_prefix"])
    team = locks.team_lock(team)  # one count at a time
    if Webhook.objects.filter(team=team).count() >= MAX_WEBHOOKS_PER_TEAM:
        raise Conflict(
            f"Team {team.slug!r} has {MAX_WEBHOOKS_PER_TEAM} webhooks already, the most it "
            "may have; delete one first."
        )
    duplicate = Conflict(f"Team {team.slug!r} already has a webhook to {webhook.url}.", field="url")
    if Webhook.objects.filter(team=team, url=webhook.url).exists():
        raise duplicate
    with integrity_as(duplicate):
        webhook.save()
    return webhook, secret


@transaction.atomic
def webhook_update(*, webhook: Webhook, fields: list[str]) -> Webhook:
    """Save the settings a person changed (URL, events, enabled); the secret stays."""
    unknown = set(fields) - set(WEBHOOK_SETTINGS)
    if unknown:
        raise InvalidInput(f"Not a webhook setting: {', '.join(sorted(unknown))}.")
    if "url" in fields:
        webhook.url = _url_check(webhook.url)
    validated(webhook, exclude=[f for f in ("url", "events") if f not in fields] + ["team"])
    if not fields:
        return webhook
    duplicate = Conflict(
        f"Team {webhook.team.slug!r} already has a webhook to {webhook.url}.", field="url"
    )
    with integrity_as(duplicate):
        webhook.save(update_fields=fields)
    return webhook


@transaction.atomic
def webhook_secret_rotate(*, webhook: Webhook) -> tuple[Webhook, str]:
    """A new secret for the webhook, returned this once (stored encrypted): from now on
    every delivery, those already queued and their retries included, is signed with it,
    and the old secret verifies nothing Loom sends."""
    secret, encrypted, prefix = _new_secret()
    if not Webhook.objects.filter(pk=webhook.pk).update(
        secret_encrypted=encrypted, secret_prefix=prefix
    ):
        raise NotFound(f"Webhook {webhook.pk} no longer exists.")
    webhook.secret_encrypted, webhook.secret_prefix = encrypted, prefix
    return webhook, secret


@transaction.atomic
def webhook_delete(*, webhook: Webhook) -> None:
    """Delete the webhook and its delivery log; nothing more is sent to it."""
    webhook.delete()


def webhook_deliveries(*, webhook: Webhook) -> QuerySet[WebhookDelivery]:
    """The webhook's delivery log, oldest first."""
    return WebhookDelivery.objects.filter(webhook=webhook).order_by("id")


# --- events to deliveries ------------------------------------------------------


@transaction.atomic(savepoint=False)
def webhooks_notify(*, team: Team, event: str, payload: dict) -> list[WebhookDelivery]:
    """Queue `event` for every enabled webhook of the team that wants it, in the
    caller's transaction (the change and its deliveries commit together).

    `payload` is the event's own fields; the body POSTed wraps it:
    {"event", "team", "team_name", "occurred_at", "data": payload}."""
    event = WebhookEvent(event)  # an unknown name is a bug: ValueError
    hooks = [h for h in Webhook.objects.filter(team_id=team.pk, enabled=True) if event in h.events]
    if not hooks:
        return []
    now = timezone.now()
    body = {
        "event": event.value,
        "team": team.slug,
        "team_name": team.name,
        "occurred_at": now.isoformat(),
        "data": services.without_nul(payload),
    }
    rows = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(webhook=h, event=event, payload=body, next_attempt_at=now) for h in hooks
    )
    transaction.on_commit(DUE.set)
    return rows


# --- delivering (the engine's side) ----------------------------------------------


def _due(now: datetime) -> Q:
    return Q(status=Status.PENDING, next_attempt_at__lte=now) | Q(
        status=Status.DELIVERING,
        lease_expires_at__lte=now,
        attempts__lt=settings.LOOM_WEBHOOK_MAX_ATTEMPTS,
    )


def deliveries_give_up_abandoned(now: datetime) -> int:
    """Deliveries whose sender died mid-send after their last allowed attempt fail."""
    return WebhookDelivery.objects.filter(
        status=Status.DELIVERING,
        lease_expires_at__lte=now,
        attempts__gte=settings.LOOM_WEBHOOK_MAX_ATTEMPTS,
    ).update(
        status=Status.FAILED,
        next_attempt_at=None,
        lease_expires_at=None,
        claimed_by="",
        last_error="Gave up: the sender stopped during the last allowed attempt.",
    )


def deliveries_due(*, now: datetime, limit: int) -> list[int]:
    """Ids of deliveries due now, the longest waiting first."""
    return list(
        WebhookDelivery.objects.filter(_due(now))
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)[:limit]
    )


def delivery_claim(
    delivery_id: int, *, worker: str, now: datetime, lease: timedelta
) -> WebhookDelivery | None:
    """Take a due delivery for one attempt. Of any number of racing senders exactly
    one gets it; the attempt counts from here, so a sender that dies mid-send still
    uses one up."""
    claimed = WebhookDelivery.objects.filter(_due(now), pk=delivery_id).update(
        status=Status.DELIVERING,
        claimed_by=worker[:120],
        lease_expires_at=now + lease,
        attempts=F("attempts") + 1,
    )
    if not claimed:
        return None
    return WebhookDelivery.objects.select_related("webhook", "webhook__team").get(pk=delivery_id)


def _mine(delivery: WebhookDelivery, worker: str) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(
        pk=delivery.pk, status=Status.DELIVERING, claimed_by=worker[:120]
    )


def delivery_succeeded(
    delivery: WebhookDelivery, *, worker: str, status_code: int, now: datetime
) -> bool:
    """The receiver answered 2xx. False when the lease was lost meanwhile."""
    return bool(
        _mine(delivery, worker).update(
            status=Status.DELIVERED,
            delivered_at=now,
            next_attempt_at=None,
            lease_expires_at=None,
            last_status_code=status_code,
            last_error="",
        )
    )


def backoff(attempts: int) -> timedelta:
    """How long after its `attempts`-th failed attempt a delivery is tried again:
    LOOM_WEBHOOK_BACKOFF seconds, doubled each attempt, at most an hour."""
    base = timedelta(seconds=settings.LOOM_WEBHOOK_BACKOFF)
    return min(base * 2 ** max(attempts - 1, 0), MAX_BACKOFF)


def delivery_failed(
    delivery: WebhookDelivery,
    *,
    worker: str,
    error: str,
    now: datetime,
    status_code: int | None = None,
    retry: bool = True,
) -> str:
    """The attempt failed (an answer other than 2xx, a timeout, no connection): due
    again after the backoff ("retrying"), or failed for good after the last allowed
    attempt or when another attempt cannot go better (`retry` False: a URL that cannot
    be used, an address the outbound guard refuses): "failed"; "" when the lease was
    lost meanwhile."""
    delivery.refresh_from_db(fields=["attempts"])
    error = services.without_nul(error)[:ERROR_LIMIT]
    final = not retry or delivery.attempts >= settings.LOOM_WEBHOOK_MAX_ATTEMPTS
    if not retry:
        error = f"{error} Not retried."[:ERROR_LIMIT]
    elif final:
        error = f"Gave up after {delivery.attempts} attempts. Last: {error}"[:ERROR_LIMIT]
    recorded = _mine(delivery, worker).update(
        status=Status.FAILED if final else Status.PENDING,
        next_attempt_at=None if final else now + backoff(delivery.attempts),
        lease_expires_at=None,
        claimed_by="",
        last_status_code=status_code,
        last_error=error,
    )
    if not recorded:
        return ""
    return "failed" if final else "retrying"


@transaction.atomic
def delivery_retry(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a failed delivery again ("Send again" in the admin): due now, with its
    attempts counted afresh. A delivered or queued one is left as it is."""
    requeued = WebhookDelivery.objects.filter(pk=delivery.pk, status=Status.FAILED).update(
        status=Status.PENDING,
        attempts=0,
        next_attempt_at=timezone.now(),
        lease_expires_at=None,
        claimed_by="",
    )
    delivery.refresh_from_db()
    if not requeued:
        raise Conflict(
            f"Delivery {delivery.pk} is {delivery.status}: only a failed delivery is sent again."
        )
    transaction.on_commit(DUE.set)
    return delivery
