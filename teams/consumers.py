"""Channels consumers: the turn worker and the two live sockets.

The sockets' handlers are derived from teams.events: every event declared for an
audience gets a handler on that audience's consumer, so none can be forgotten."""

import asyncio
import time
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.consumer import AsyncConsumer
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from teams import events, selectors
from teams.engine.worker import run_claimed_turn
from teams.events import Audience
from teams.models import Team
from teams.schemas import MessageOut, PMRequestOut, QueryOut

MAX_CONCURRENT_TURNS = 8
# How stale a socket's view of its user's rights may get: a PM removed from a
# team, demoted or deactivated stops receiving within this many seconds.
ACCESS_RECHECK_SECONDS = 5.0


class TurnWorkerConsumer(AsyncConsumer):
    """Listens on `loom.turns`; each wake-up names a turn to claim and run.

    Turns run in their own threads so one slow model call does not hold up the
    others; the claim makes a duplicate wake-up harmless."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots = asyncio.Semaphore(MAX_CONCURRENT_TURNS)
        self.tasks: set[asyncio.Task] = set()

    async def turn_queued(self, message):
        task = asyncio.ensure_future(self._run(message["turn_id"]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, turn_id: int):
        async with self.slots:
            await sync_to_async(run_claimed_turn, thread_sensitive=False)(turn_id)


def serves(audience: Audience):
    """Give the consumer a handler for every event declared for `audience`."""

    def decorate(cls):
        for event in events.for_audience(audience):
            setattr(cls, events.handler_name(event.name), cls.forward_event)
        cls.audience = audience
        return cls

    return decorate


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """A server-to-browser stream that re-reads the user's visible teams now and
    then, not only at connect."""

    audience = Audience.NONE
    checked_at = 0.0
    team_ids: set[int] = frozenset()

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """These sockets only speak: whatever a client sends is ignored, garbage included."""

    async def refresh_access(self, *, force: bool = False) -> set[int] | None:
        now = time.monotonic()
        if force or now - self.checked_at >= ACCESS_RECHECK_SECONDS:
            self.checked_at = now
            ids = await database_sync_to_async(_visible_team_ids)(self.scope.get("user"))
            self.team_ids = ids or set()
            return ids
        return self.team_ids

    async def forward_event(self, message):
        """A declared event from the channel layer, passed on if the user may see it."""
        event = events.declared(message["type"])
        wire = {"event": event.name, **{k: v for k, v in message.items() if k != "type"}}
        if await self.may_see(event, wire):
            await self.send_json(wire)

    async def may_see(self, event, wire) -> bool:  # pragma: no cover - interface
        raise NotImplementedError


@serves(Audience.TEAM)
class TeamConsumer(LiveConsumer):
    """Streams one team's events to a user who may see that team."""

    async def connect(self):
        slug = self.scope["url_route"]["kwargs"]["slug"]
        self.team = await database_sync_to_async(selectors.team_for_user)(
            user=self.scope.get("user"), slug=slug
        )
        if self.team is None:
            await self.close(code=4403)
            return
        self.team_ids, self.checked_at = {self.team.id}, time.monotonic()
        self.group = events.team_group(self.team.id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Catch up on what happened between rendering the page (or losing the
        # connection) and joining the group; the page drops duplicates by id.
        for event in await database_sync_to_async(team_catch_up)(
            self.team.id, _after_id(self.scope)
        ):
            await self.send_json(event.wire())

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def may_see(self, event, wire) -> bool:
        visible = await self.refresh_access()
        if visible is None or self.team.id not in visible:  # demoted, removed, deactivated
            await self.close(code=4403)
            return False
        return True


@serves(Audience.INBOX)
class PMInboxConsumer(LiveConsumer):
    """Open PM requests appearing and leaving, for the teams this user may see."""

    async def connect(self):
        user = self.scope.get("user")
        if await self.refresh_access(force=True) is None:
            await self.close(code=4403)
            return
        await self.channel_layer.group_add(events.INBOX_GROUP, self.channel_name)
        await self.accept()
        # The open requests as of now, so the page can settle anything it missed.
        requests = await database_sync_to_async(_open_requests)(user)
        await self.send_json(events.PMRequestOpenList(requests=requests).wire())

    async def disconnect(self, code):
        await self.channel_layer.group_discard(events.INBOX_GROUP, self.channel_name)

    async def may_see(self, event, wire) -> bool:
        team_id = event.team_of(wire)
        # A team given since the last check shows at once; one taken away
        # stops showing at the next periodic check.
        visible = await self.refresh_access(force=team_id not in self.team_ids)
        if visible is None:
            await self.close(code=4403)
            return False
        return team_id in visible


def _visible_team_ids(user) -> set[int] | None:
    """None when the user may not use the live pages at all (any more)."""
    if user is None or not user.is_authenticated:
        return None
    # Fresh from the database: the scope's user is as it was at connect.
    user = get_user_model().objects.filter(pk=user.pk, is_active=True, is_staff=True).first()
    if user is None:
        return None
    return set(selectors.teams_visible_to(user=user).values_list("id", flat=True))


def _after_id(scope) -> int:
    value = parse_qs(scope.get("query_string", b"").decode()).get("after", ["0"])[0]
    return int(value) if value.isdigit() else 0


# The event a query's latest hop stands for, to replay on connect.
QUERY_EVENT_BY_HOP = {
    "ask": events.QueryAsked,
    "forward": events.QueryForwarded,
    "answer": events.QueryAnswered,
    "expire": events.QueryExpired,
}


def team_catch_up(team_id: int, after_id: int) -> list[events.Event]:
    """What a page may have missed: the messages after `after_id`, the latest
    questions between agents as they stand now, then the team's status with its
    open PM request."""
    team = Team.objects.get(pk=team_id)
    missed = [
        events.MessageCreated(message=MessageOut.of(m))
        for m in selectors.team_messages_after(team=team, after_id=after_id)
    ]
    queries = [
        QUERY_EVENT_BY_HOP.get(q.hops[-1].get("kind") if q.hops else "", events.QueryAsked)(
            query=QueryOut.of(q)
        )
        for q in reversed(selectors.team_recent_queries(team=team))
    ]
    request = selectors.team_open_pm_request(team=team)
    status = events.TeamStatusChanged.of(team)
    status.pm_request = PMRequestOut.of(request) if request else None
    return [*missed, *queries, status]


def _open_requests(user) -> list[PMRequestOut]:
    return [PMRequestOut.of(r) for r in selectors.open_pm_requests_for(user=user)]
