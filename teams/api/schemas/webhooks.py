"""Webhooks and their deliveries: the secret is shown once, when made."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from teams.api.schemas.common import FromRow, In
from teams.models import (
    WEBHOOK_URL_MAX,
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


class WebhookOut(FromRow):
    id: int
    url: str
    events: list[str]
    enabled: bool
    secret_prefix: str = Field(description="The secret's first characters, to tell it.")
    created_at: datetime


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(
        description="Signs every delivery (X-Loom-Signature): shown this once, never again."
    )


class WebhookDeliveryOut(FromRow):
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


class WebhookDeliveryPage(BaseModel):
    deliveries: list[WebhookDeliveryOut]
    next_after: int = Field(description="Pass as `after` to get what follows.")
    has_more: bool
