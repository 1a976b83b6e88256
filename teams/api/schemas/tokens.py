"""API tokens: the key is shown once, when made."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from teams.api.schemas.common import In
from teams.models import (
    AGENT_NAME_PATTERN,
    ApiToken,
)


class TokenIn(In):
    label: str = Field("", max_length=ApiToken._meta.get_field("name").max_length)
    agent: str | None = Field(None, pattern=AGENT_NAME_PATTERN, description="Bind to an agent.")
    expires_in: str | None = Field(
        None,
        max_length=20,
        description="Expire this long from now: 30m, 12h, 90d (minutes, hours, days; at "
        "most 3650d). Omitted: never expires.",
    )
    read_only: bool = Field(
        False, description="Reads only: every GET works; writes and tool calls are a 403."
    )


class TokenOut(BaseModel):
    id: int
    label: str
    prefix: str
    agent: str | None
    created_at: datetime
    last_used_at: datetime | None = Field(
        description="When it was last used (to the minute); null: never."
    )
    revoked_at: datetime | None
    expires_at: datetime | None = Field(description="Null: never expires.")
    read_only: bool

    @classmethod
    def of(cls, token: ApiToken) -> TokenOut:
        return cls(
            id=token.id,
            label=token.name,
            prefix=token.prefix,
            agent=token.agent.name if token.agent_id else None,
            created_at=token.created_at,
            last_used_at=token.last_used_at,
            revoked_at=token.revoked_at,
            expires_at=token.expires_at,
            read_only=token.read_only,
        )


class TokenCreatedOut(TokenOut):
    key: str = Field(description="The token itself: shown this once, never again.")
