"""Queries, keepers and anchors."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from teams.api.schemas.common import FromRow, In
from teams.live.event_payloads import QueryOut
from teams.models import (
    HUMAN_TEXT_LIMIT,
    Keeper,
    Query,
)


class QueryDetailOut(QueryOut):
    enrichments: list[str]
    max_hops: int
    created_at: datetime
    expires_at: datetime
    answered_at: datetime | None

    @classmethod
    def of(cls, query: Query) -> QueryDetailOut:
        return cls(
            **QueryOut.of(query).model_dump(),
            enrichments=query.enrichments,
            max_hops=query.max_hops,
            created_at=query.created_at,
            expires_at=query.expires_at,
            answered_at=query.answered_at,
        )


class KeeperOut(BaseModel):
    id: int
    topic: str
    index_entry: str
    agent: str | None
    entries: int
    created_at: datetime

    @classmethod
    def of(cls, keeper: Keeper, entries: int) -> KeeperOut:
        return cls(
            id=keeper.id,
            topic=keeper.topic,
            index_entry=keeper.index_entry,
            agent=keeper.agent.name if keeper.agent_id else None,
            entries=entries,
            created_at=keeper.created_at,
        )


class KeeperEntryOut(FromRow):
    position: int
    role: str
    content: str


class KeeperDetailOut(BaseModel):
    keeper: KeeperOut
    entries: list[KeeperEntryOut]
    next_after: int = Field(description="Pass as `after` (a position) to get what follows.")
    has_more: bool


class RetrievalOut(BaseModel):
    result: str


class AnchorIn(In):
    value: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)


class AnchorOut(FromRow):
    key: str
    value: str
    updated_by: str
    updated_at: datetime


class AnchorRevisionOut(FromRow):
    value: str
    deleted: bool
    changed_by: str
    created_at: datetime
