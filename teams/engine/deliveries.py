"""Webhook deliveries: POST the due rows, signed, and record each outcome.

`deliver_due` claims each due delivery with a conditional update (teams.integrations.webhooks),
so any number of processes running it send a delivery once per attempt. The body is
the delivery's stored payload as compact JSON; its headers:

    Content-Type: application/json
    X-Loom-Event: pm_request.opened            (the event's name)
    X-Loom-Delivery: 42                        (the row's id: the same on every retry)
    X-Loom-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>

A 2xx answer delivers it; any other answer (redirects are not followed), a timeout
(LOOM_WEBHOOK_TIMEOUT, for the whole attempt: connecting, sending and the answer's
head together) or a connection error is retried after the backoff. Only the answer's
status is kept: its body is never read, stored or logged (a receiver Loom was tricked
into posting to must not become a way to read it). A URL that cannot be used, or one
the outbound guard (teams.lib.outbound) refuses because it leads to a private address, is
failed at once with the reason, not retried. The secret is used to sign and never
logged or recorded.

It runs beside the sweeper (`serve` and `sweep`), in a thread of its own that sends up
to LOOM_WEBHOOK_CONCURRENCY deliveries at once (the database work stays in that
thread; only the requests run in the pool): a slow receiver delays other deliveries
little, and never turns."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import socket
import threading
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import timedelta

import httpx2 as httpx
from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from teams.errors import LoomError
from teams.integrations import webhooks
from teams.lib import outbound
from teams.models import WebhookDelivery
from teams.observability import telemetry

log = logging.getLogger("loom.webhooks")

SENDER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
DELIVER_SECONDS = 5  # the longest a delivery queued by another process waits for a poll
BATCH = 20
USER_AGENT = "Loom-Webhooks/1"


def body_of(delivery: WebhookDelivery) -> bytes:
    """The exact bytes POSTed (and signed): the same on every attempt."""
    return json.dumps(
        delivery.payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False
    ).encode()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def concurrency() -> int:
    return max(1, int(settings.LOOM_WEBHOOK_CONCURRENCY))


def lease() -> timedelta:
    """How long a claimed delivery is this sender's: a pass claims each delivery just
    before sending it, at most `concurrency()` in flight, each attempt ending within
    the timeout; with room to record the outcome."""
    rounds = math.ceil(BATCH / concurrency()) + 1
    return timedelta(seconds=rounds * settings.LOOM_WEBHOOK_TIMEOUT + 30)


@dataclass
class Attempt:
    """What one attempt sends (made from the row in the pass's thread)."""

    url: str
    body: bytes
    headers: dict
    timeout: float


@dataclass
class Sent:
    """How an attempt went: the receiver's status, or why there is none."""

    status_code: int | None = None
    error: str = ""
    retry: bool = True


def deliver_due(now=None, limit: int = BATCH, worker: str = SENDER_ID) -> dict:
    """Send up to `limit` due deliveries, up to LOOM_WEBHOOK_CONCURRENCY at once;
    counts by outcome. Each is claimed (teams.integrations.webhooks.delivery_claim) just before it
    is sent, so of several senders exactly one sends it."""
    now = now or timezone.now()
    counts = {"delivered": 0, "retrying": 0, "failed": webhooks.deliveries_give_up_abandoned(now)}
    waiting = webhooks.deliveries_due(now=now, limit=limit)

    def count(outcome: str) -> None:
        if outcome:
            counts[outcome] += 1

    def claimed_next() -> tuple[WebhookDelivery, Attempt] | None:
        while waiting:
            delivery = webhooks.delivery_claim(
                waiting.pop(0), worker=worker, now=now, lease=lease()
            )
            if delivery is None:
                continue  # another sender took it
            attempt = prepare(delivery, worker=worker, now=now)
            if isinstance(attempt, str):
                count(attempt)  # settled without a request (no secret)
                continue
            return delivery, attempt
        return None

    width = concurrency()
    if width == 1 or len(waiting) <= 1:
        while (taken := claimed_next()) is not None:
            delivery, attempt = taken
            count(record(delivery, send_traced(delivery, attempt), worker=worker, now=now))
        return counts
    with ThreadPoolExecutor(width, thread_name_prefix="loom-webhook-send") as pool:
        flying: dict[Future, WebhookDelivery] = {}
        while True:
            while len(flying) < width and (taken := claimed_next()) is not None:
                delivery, attempt = taken
                flying[pool.submit(send_traced, delivery, attempt)] = delivery
            if not flying:
                break
            done, _ = wait(flying, return_when=FIRST_COMPLETED)
            for future in done:
                delivery = flying.pop(future)
                count(record(delivery, future.result(), worker=worker, now=now))
    return counts


def prepare(delivery: WebhookDelivery, *, worker: str, now) -> Attempt | str:
    """The claimed delivery's request, or its outcome when it cannot be sent."""
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
    return Attempt(webhook.url, body, headers, settings.LOOM_WEBHOOK_TIMEOUT)


def deliver(delivery: WebhookDelivery, *, worker: str, now) -> str:
    """One attempt of a claimed delivery, in this thread: "delivered", "retrying",
    "failed", or "" when the lease was lost meanwhile (the other sender records it)."""
    attempt = prepare(delivery, worker=worker, now=now)
    if isinstance(attempt, str):
        return attempt
    return record(delivery, send_traced(delivery, attempt), worker=worker, now=now)


def send_traced(delivery: WebhookDelivery, attempt: Attempt) -> Sent:
    """send(), as a `POST` client span when tracing is on: the receiver gets its
    traceparent (no database here either: the delivery's fields are read already)."""
    with telemetry.webhook_span(delivery) as span:
        telemetry.inject(attempt.headers)
        sent = send(attempt)
        telemetry.webhook_result(span, _span_outcome(sent), sent.status_code)
    return sent


def _span_outcome(sent: Sent) -> str:
    if sent.status_code is None:
        return "not_sent"
    return "delivered" if 200 <= sent.status_code < 300 else "refused"


def send(attempt: Attempt) -> Sent:
    """POST it (no database here: it runs in the pool). Only the status is read."""
    timeout = attempt.timeout
    try:
        outbound.parse(attempt.url)
        with outbound.client(timeout=timeout, max_response_bytes=0) as client:
            with client.stream(
                "POST", attempt.url, content=attempt.body, headers=attempt.headers
            ) as response:
                return Sent(status_code=response.status_code)
    except outbound.Refused as exc:
        return Sent(error=f"Refused: {exc.reason}.", retry=False)
    except httpx.TimeoutException:
        return Sent(error=f"Timed out after {timeout:g} s.")
    except (httpx.HTTPError, httpx.InvalidURL, OSError, UnicodeError) as exc:
        refused = outbound.refusal_in(exc)
        if refused:
            return Sent(error=f"Refused: {refused}.", retry=False)
        if isinstance(exc, httpx.InvalidURL | UnicodeError):
            return Sent(error=f"The URL cannot be used: {exc}.", retry=False)
        return Sent(error=f"Could not deliver: {exc or type(exc).__name__}.")
    except Exception as exc:  # a bug of Loom's: logged (no answer is read, none is in it)
        log.exception("Webhook delivery to %s raised", attempt.url)
        return Sent(error=f"Could not deliver: {type(exc).__name__}.")


def record(delivery: WebhookDelivery, sent: Sent, *, worker: str, now) -> str:
    """The attempt's outcome on the row (in the pass's thread)."""
    webhook = delivery.webhook
    if sent.status_code is not None and 200 <= sent.status_code < 300:
        delivered = webhooks.delivery_succeeded(
            delivery, worker=worker, status_code=sent.status_code, now=now
        )
        log.info("Webhook %s: %s #%s delivered", webhook.pk, delivery.event, delivery.pk)
        return "delivered" if delivered else ""
    error = sent.error or f"HTTP {sent.status_code}"
    log.warning(
        "Webhook %s: %s #%s attempt %s failed: %s",
        webhook.pk,
        delivery.event,
        delivery.pk,
        delivery.attempts,
        error,
    )
    return webhooks.delivery_failed(
        delivery,
        worker=worker,
        error=error,
        now=now,
        status_code=sent.status_code,
        retry=sent.retry,
    )


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
    process queued (teams.integrations.webhooks.DUE), until `stop` is set."""
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
