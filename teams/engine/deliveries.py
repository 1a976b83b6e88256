"""Webhook deliveries: POST the due rows, signed, and record each outcome.

`deliver_due` claims each due delivery with a conditional update (teams.webhooks),
so any number of processes running it send a delivery once per attempt. The body is
the delivery's stored payload as compact JSON; its headers:

    Content-Type: application/json
    X-Loom-Event: pm_request.opened            (the event's name)
    X-Loom-Delivery: 42                        (the row's id: the same on every retry)
    X-Loom-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>

A 2xx answer delivers it; any other answer (redirects are not followed), a timeout
(LOOM_WEBHOOK_TIMEOUT) or a connection error is retried after the backoff. The
secret is used to sign and never logged or recorded.

It runs beside the sweeper (`serve` and `sweep`), in a thread of its own: a slow
receiver delays other deliveries, never turns."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import socket
import threading
import uuid
from datetime import timedelta

import httpx2 as httpx
from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from teams import webhooks
from teams.errors import LoomError
from teams.models import WebhookDelivery

log = logging.getLogger("loom.webhooks")

SENDER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
DELIVER_SECONDS = 5  # the longest a delivery queued by another process waits for a poll
BATCH = 20
SNIPPET = 200  # characters of a refusing receiver's answer kept as the error
USER_AGENT = "Loom-Webhooks/1"


def body_of(delivery: WebhookDelivery) -> bytes:
    """The exact bytes POSTed (and signed): the same on every attempt."""
    return json.dumps(
        delivery.payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False
    ).encode()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def lease() -> timedelta:
    """How long a claimed delivery is this sender's: an attempt's connect, write and
    read may each take the timeout, with room to record the outcome."""
    return timedelta(seconds=4 * settings.LOOM_WEBHOOK_TIMEOUT + 30)


def deliver_due(now=None, limit: int = BATCH, worker: str = SENDER_ID) -> dict:
    """Send up to `limit` due deliveries, one at a time; counts by outcome."""
    now = now or timezone.now()
    counts = {"delivered": 0, "retrying": 0, "failed": webhooks.deliveries_give_up_abandoned(now)}
    for delivery_id in webhooks.deliveries_due(now=now, limit=limit):
        delivery = webhooks.delivery_claim(delivery_id, worker=worker, now=now, lease=lease())
        if delivery is None:
            continue  # another sender took it
        outcome = deliver(delivery, worker=worker, now=now)
        if outcome:
            counts[outcome] += 1
    return counts


def deliver(delivery: WebhookDelivery, *, worker: str, now) -> str:
    """One attempt of a claimed delivery: "delivered", "retrying", "failed", or ""
    when the lease was lost meanwhile (the other sender records it)."""
    webhook = delivery.webhook
    try:
        secret = webhooks.webhook_secret(webhook)
    except LoomError as exc:
        return webhooks.delivery_failed(delivery, worker=worker, error=exc.message, now=now)
    body = body_of(delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Loom-Event": delivery.event,
        "X-Loom-Delivery": str(delivery.pk),
        "X-Loom-Signature": signature(secret, body),
    }
    timeout = settings.LOOM_WEBHOOK_TIMEOUT
    status_code = None
    try:
        status_code, answer = _post(webhook.url, body, headers, timeout)
    except httpx.TimeoutException:
        error = f"Timed out after {timeout:g} s."
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        error = f"Could not deliver: {exc or type(exc).__name__}."
    except Exception as exc:  # whatever else the URL or the answer causes: retried
        log.exception("Webhook %s: delivery #%s raised", webhook.pk, delivery.pk)
        error = f"Could not deliver: {type(exc).__name__}: {exc}."
    else:
        if 200 <= status_code < 300:
            delivered = webhooks.delivery_succeeded(
                delivery, worker=worker, status_code=status_code, now=now
            )
            log.info("Webhook %s: %s #%s delivered", webhook.pk, delivery.event, delivery.pk)
            return "delivered" if delivered else ""
        error = f"HTTP {status_code}" + (f": {answer}" if answer else "")
    log.warning(
        "Webhook %s: %s #%s attempt %s failed: %s",
        webhook.pk,
        delivery.event,
        delivery.pk,
        delivery.attempts,
        error,
    )
    return webhooks.delivery_failed(
        delivery, worker=worker, error=error, now=now, status_code=status_code
    )


def _post(url: str, body: bytes, headers: dict, timeout: float) -> tuple[int, str]:
    """POST and read at most the start of the answer (a receiver cannot make us
    hold a large body)."""
    with httpx.Client(timeout=timeout, follow_redirects=False) as client:
        with client.stream("POST", url, content=body, headers=headers) as response:
            start = b""
            for chunk in response.iter_bytes():
                start += chunk
                if len(start) >= SNIPPET * 4:
                    break
            text = start.decode("utf-8", "replace").strip()
            return response.status_code, " ".join(text.split())[:SNIPPET]


# --- running it ------------------------------------------------------------------


def deliver_in_thread() -> dict:
    """One pass with this thread's own database connection."""
    close_old_connections()
    try:
        return deliver_due()
    finally:
        connections.close_all()


def run_forever(interval: float = DELIVER_SECONDS, stop: threading.Event | None = None) -> None:
    """Deliver what is due, then wait for the next poll or for deliveries this
    process queued (teams.webhooks.DUE), until `stop` is set."""
    stop = stop or threading.Event()
    while not stop.is_set():
        webhooks.DUE.clear()
        try:
            counts = deliver_in_thread()
            if any(counts.values()):
                log.info("Webhook deliveries: %s", counts)
            if sum(counts.values()) >= BATCH:
                continue  # more may be due: no wait
        except Exception:
            log.exception("Webhook delivery pass failed")
        webhooks.DUE.wait(interval)


def start_thread(
    interval: float = DELIVER_SECONDS, stop: threading.Event | None = None
) -> threading.Thread:
    """The deliverer, in a daemon thread of this process (until `stop` is set)."""
    thread = threading.Thread(
        target=run_forever, args=(interval, stop), name="loom-webhooks", daemon=True
    )
    thread.start()
    return thread
