"""Webhooks and their deliveries: the secret is shown once, when made."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from teams.api.schemas.common import In
from teams.models import (
    WEBHOOK_URL_MAX,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)

WebhookEventName = Literal[tuple(WebhookEvent.values)]  # type: ignore[valid-type]


class WebhookIn(In):
    url: str = Field(
        min_length=1,
        max_length=WEBHOOK_URL_MAX,
        description="Where the events are POSTed: an http:// or https:// URL.",
    )
    events: list[WebhookEventName] = Field(
        min_length=1, max_length=len(WebhookEvent.values), description="Each at most once."
    )
    enabled: bool = True


class WebhookOut(BaseModel):
    id: int
    url: str
    events: list[str]
    enabled: bool
    secret_prefix: str = Field(description="The secret's first characters, to tell it.")
    created_at: datetime

    @classmethod
    def of(cls, webhook: Webhook) -> WebhookOut:
        return cls(
            id=webhook.id,
            url=webhook.url,
            events=list(webhook.events),
            enabled=webhook.enabled,
            secret_prefix=webhook.secret_prefix,
            created_at=webhook.created_at,
        )


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(
        description="Signs every delivery (X-Loom-Signature): shown this once, never again."
    )


class WebhookDeliveryOut(BaseModel):
    id: int = Field(description="Sent as X-Loom-Delivery: the same on every retry.")
    event: str
    status: str = Field(description="pending, delivering, delivered or failed.")
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str
    delivered_at: datetime | None
    created_at: datetime
    payload: dict = Field(description="The JSON body POSTed.")

    @classmethod
    def of(cls, delivery: WebhookDelivery) -> WebhookDeliveryOut:
        return cls(
            id=delivery.id,
            event=delivery.event,
            status=delivery.status,
            attempts=delivery.attempts,
            next_attempt_at=delivery.next_attempt_at,
            last_status_code=delivery.last_status_code,
            last_error=delivery.last_error,
            delivered_at=delivery.delivered_at,
            created_at=delivery.created_at,
            payload=delivery.payload,
        )


class WebhookDeliveryPage(BaseModel):
    deliveries: list[WebhookDeliveryOut]
    next_after: int = Field(description="Pass as `after` to get what follows.")
    has_more: bool
