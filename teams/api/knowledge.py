"""What the team knows: questions between agents, keepers, and anchors."""

import re

from django.db.models import Count, Q
from ninja import Query, Router, Status

from teams import services
from teams.access import Caller
from teams.api.auth import caller
from teams.api.paging import MAX_ID, Limit, page_of, within_chars
from teams.api.schemas.common import responses
from teams.api.schemas.knowledge import (
    AnchorIn,
    AnchorOut,
    AnchorRevisionOut,
    KeeperDetailOut,
    KeeperEntryOut,
    KeeperOut,
    QueryDetailOut,
    RetrievalOut,
)
from teams.conversation import keepers
from teams.engine.loop import model_asker
from teams.errors import NotFound
from teams.lib.catalog import default_model
from teams.models import (
    ANCHOR_KEY_PATTERN,
    Agent,
    Anchor,
    AnchorRevision,
    Keeper,
    KeeperEntry,
    QueryStatus,
)
from teams.models import Query as QueryRow
from tools.context import RetrieveParams

router = Router(tags=["knowledge"])

QUERY_KEY = re.compile(r"q-[0-9a-f]{1,17}")
ANCHOR_KEY = re.compile(ANCHOR_KEY_PATTERN.removeprefix("^").removesuffix("$"))


@router.get(
    "/teams/{team}/queries",
    response=responses({200: list[QueryDetailOut]}, 404),
    operation_id="queries_list",
)
def queries_list(request, team: str, status: QueryStatus | None = None, limit: int = Limit):
    """Questions between the team's agents, newest first, with their hop chains."""
    row = caller(request).team(team)
    queries = QueryRow.objects.filter(team=row).select_related("origin", "target", "answered_by")
    if status is not None:
        queries = queries.filter(status=status)
    found = [QueryDetailOut.of(q) for q in queries.order_by("-id")[:limit]]
    return within_chars(found, False, size=lambda out: len(out.model_dump_json()))[0]


@router.get(
    "/teams/{team}/queries/{key}",
    response=responses({200: QueryDetailOut}, 404),
    operation_id="queries_get",
)
def queries_get(request, team: str, key: str):
    """One query: its hop chain (asks, forwards, the answer) and its enrichments."""
    row = caller(request).team(team)
    query = None
    if QUERY_KEY.fullmatch(key):
        query = (
            QueryRow.objects.filter(team=row, key=key)
            .select_related("origin", "target", "answered_by")
            .first()
        )
    if query is None:
        raise NotFound(f"Team {row.slug!r} has no query {key!r}.")
    return QueryDetailOut.of(query)


@router.get(
    "/teams/{team}/keepers",
    response=responses({200: list[KeeperOut]}, 404),
    operation_id="keepers_list",
)
def keepers_list(request, team: str, limit: int = Limit):
    """The team's keepers, newest first (for a token bound to an agent, those holding
    lines its agent may read, counting only those)."""
    who = caller(request)
    row = who.team(team)
    viewer = _viewer(who, row)
    rows = (
        _keepers_of(viewer, row)
        .select_related("agent")
        .annotate(entry_count=Count("entries", filter=keepers.readable_by(viewer, "entries__")))
        .order_by("-id")[:limit]
    )
    return [KeeperOut.of(k, k.entry_count) for k in rows]


@router.post(
    "/teams/{team}/keepers/retrieve",
    response=responses({200: RetrievalOut}, 400, 404, 502),
    operation_id="keepers_retrieve",
)
def keepers_retrieve(request, team: str, payload: RetrieveParams):
    """Search the keepers as the context_retrieve tool does: matching lines (raw)
    or an answer from them (smart, asked of the coach's model)."""
    who = caller(request)
    row = who.team(team)
    viewer = _viewer(who, row)
    coach = row.agents.filter(role=Agent.Role.COACH).order_by("position", "id").first()
    model = coach.effective_model if coach else default_model()
    result = keepers.retrieve(
        team=row,
        query=payload.query,
        keeper_id=payload.keeper_id,
        mode=payload.mode,
        ask_model=model_asker(model=model, team=row),
        viewer=viewer,  # a bound token searches what its agent may read, as its tool does
    )
    return RetrievalOut(result=result)


@router.get(
    "/teams/{team}/keepers/{keeper_id}",
    response=responses({200: KeeperDetailOut}, 404),
    operation_id="keepers_get",
)
def keepers_get(
    request,
    team: str,
    keeper_id: int,
    after: int = Query(-1, ge=-1, le=MAX_ID, description="Entries after this position."),
    limit: int = Limit,
):
    """One keeper and its entries in order, `limit` at a time (for a token bound to an
    agent, the entries its agent may read)."""
    who = caller(request)
    row = who.team(team)
    viewer = _viewer(who, row)
    keeper = None
    if 0 < keeper_id <= MAX_ID:
        keeper = _keepers_of(viewer, row).filter(pk=keeper_id).select_related("agent").first()
    if keeper is None:
        raise NotFound(f"Team {row.slug!r} has no keeper {keeper_id}.")
    readable = keeper.entries.filter(keepers.readable_by(viewer))
    page, has_more = page_of(readable.filter(position__gt=after).order_by("position"), limit)
    page, has_more = within_chars(page, has_more, size=lambda e: len(e.content))
    return KeeperDetailOut(
        keeper=KeeperOut.of(keeper, readable.count()),
        entries=[KeeperEntryOut.model_validate(e) for e in page],
        next_after=page[-1].position if page else after,
        has_more=has_more,
    )


def _viewer(who: Caller, team) -> Agent | None:
    """The agent whose view a bound token has, None for everyone else."""
    return team.agents.filter(pk=who.agent_id).first() if who.agent_id is not None else None


def _keepers_of(viewer: Agent | None, team):
    """The keepers `viewer` may see: all for None, else its own and those holding a
    line it may read (keepers.readable_by); another agent's inbox lines stay hidden."""
    rows = Keeper.objects.filter(team=team)
    if viewer is None:
        return rows
    readable = KeeperEntry.objects.filter(keepers.readable_by(viewer)).values("keeper_id")
    return rows.filter(Q(agent=viewer) | Q(pk__in=readable))


def _anchor_key(key: str) -> str:
    if not ANCHOR_KEY.fullmatch(key):
        raise NotFound(f"No anchor {key!r}: keys use letters, digits, _ . : - (at most 80).")
    return key


@router.get(
    "/teams/{team}/anchors",
    response=responses({200: list[AnchorOut]}, 404),
    operation_id="anchors_list",
)
def anchors_list(request, team: str):
    """The team's anchors, in every agent's system prompt."""
    row = caller(request).team(team)
    return [AnchorOut.model_validate(a) for a in Anchor.objects.filter(team=row).order_by("key")]


@router.put(
    "/teams/{team}/anchors/{key}",
    response=responses({200: AnchorOut}, 400, 404),
    operation_id="anchors_put",
)
def anchors_put(request, team: str, key: str, payload: AnchorIn):
    """Pin an anchor or change its value; the old value stays in its history."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("change anchors")
    # The service validates the key (a 422 saying what keys may be).
    anchor = services.anchor_save(team=row, key=key, value=payload.value, changed_by=who.label)
    return AnchorOut.model_validate(anchor)


@router.delete(
    "/teams/{team}/anchors/{key}",
    response=responses({204: None}, 404),
    operation_id="anchors_delete",
)
def anchors_delete(request, team: str, key: str):
    """Unpin an anchor; its history keeps the deletion."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("change anchors")
    services.anchor_delete(team=row, key=_anchor_key(key), changed_by=who.label)
    return Status(204, None)


@router.get(
    "/teams/{team}/anchors/{key}/history",
    response=responses({200: list[AnchorRevisionOut]}, 404),
    operation_id="anchors_history",
)
def anchors_history(request, team: str, key: str, limit: int = Limit):
    """Every change of the anchor, newest first, deletions included."""
    row = caller(request).team(team)
    revisions = list(
        AnchorRevision.objects.filter(team=row, key=_anchor_key(key)).order_by("-id")[:limit]
    )
    if not revisions:
        raise NotFound(f"Team {row.slug!r} has never had an anchor {key!r}.")
    return [AnchorRevisionOut.model_validate(r) for r in revisions]
