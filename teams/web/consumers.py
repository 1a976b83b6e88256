"""The two live sockets: a team's (its live view) and the PM inbox's.

The sockets' handlers are derived from teams.live.events: every event declared for an
audience gets a handler on that audience's consumer, so none can be forgotten."""

import asyncio
import logging
import re
import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from teams import selectors
from teams.access import Caller, caller_for_scope, caller_refreshed
from teams.errors import NotFound
from teams.live import event_log, events
from teams.live.event_payloads import PMRequestOut, QueryOut
from teams.live.events import Audience
from teams.models import Team
from teams.web.slots import SOCKET_LEASE_SECONDS, socket_slots

log = logging.getLogger("loom.consumers")

# How stale a socket's view of its user's rights may get: a PM removed from a
# team, demoted or deactivated stops receiving within this many seconds.
ACCESS_RECHECK_SECONDS = 5.0

# Close codes of the live sockets (docs/api.md, "Live events"); the pages stop
# reconnecting on each of them and say why.
CLOSE_ACCESS_REFUSED = 4403  # may not see this (any more), or not logged in
CLOSE_CLIENT_SENT = 4400  # the socket only speaks: a client must not send anything
CLOSE_TOO_MANY_SOCKETS = 4429  # the user has MAX_SOCKETS_PER_USER live sockets open

# Live sockets one user may hold open at once, both routes together.
MAX_SOCKETS_PER_USER = 20
# What a socket is sent on connect to catch up: at most this many of the newest
# missed messages and this many characters of their content; the connect
# `team.status` says how many older ones were left out (`catch_up_omitted`).
CATCH_UP_MAX_MESSAGES = 200
CATCH_UP_MAX_CHARS = 256 * 1024
# A team socket that has heard nothing for this long reads the team's last sequence
# number, in case the events it missed were the last ones (the wait doubles while
# nothing happens, up to the maximum, and starts again at each event).
HEAD_CHECK_FIRST_SECONDS = 1.0
HEAD_CHECK_MAX_SECONDS = 30.0


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
    then, not only at connect, and holds one of its user's socket slots."""

    audience = Audience.NONE
    checked_at = 0.0
    team_ids: set[int] = frozenset()
    caller: Caller | None = None
    slot_user_id: int | None = None
    renewer: asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the socket ends, cancelled included
            watcher = getattr(self, "watcher", None)
            if watcher is not None:
                watcher.cancel()
            await self.release_slot()

    async def websocket_receive(self, message):
        """These sockets only speak. The first frame a client sends, text or bytes,
        closes the socket (CLOSE_CLIENT_SENT) and ends the consumer: nothing is
        decoded, and nothing the client sends after it is read."""
        await self.close(code=CLOSE_CLIENT_SENT)
        await self.websocket_disconnect({"code": CLOSE_CLIENT_SENT})  # raises StopConsumer

    async def take_slot(self) -> bool:
        """One of the user's MAX_SOCKETS_PER_USER slots, or False when all are taken."""
        slots = socket_slots(self.channel_layer)
        user_id = str(self.caller)
        if not await slots.take(user_id, self.channel_name, MAX_SOCKETS_PER_USER):
            return False
        self.slot_user_id = user_id
        self.renewer = asyncio.ensure_future(self._renew_slot(slots))
        return True

    async def _renew_slot(self, slots):
        while True:
            await asyncio.sleep(SOCKET_LEASE_SECONDS / 3)
            try:
                await slots.renew(self.slot_user_id, self.channel_name)
            except Exception as exc:  # a channel layer blip: try again next time
                log.warning("Could not renew a socket slot: %s", exc)

    async def release_slot(self):
        if self.renewer is not None:
            self.renewer.cancel()
            self.renewer = None
        if self.slot_user_id is not None:
            user_id, self.slot_user_id = self.slot_user_id, None
            try:
                await socket_slots(self.channel_layer).release(user_id, self.channel_name)
            except Exception as exc:  # the lease runs out on its own
                log.warning("Could not release a socket slot: %s", exc)

    async def refuse(self, code: int):
        """Refuse with a close code the page can act on: accepted first, since a close
        before accepting reaches the browser as a failed handshake (1006), and the page
        would keep retrying."""
        await self.accept()
        await self.close(code=code)

    async def refresh_access(self, *, force: bool = False) -> set[int] | None:
        if self.caller is not None and self.caller.expired():  # at once, not at the recheck
            self.team_ids = set()
            return None
        now = time.monotonic()
        if force or now - self.checked_at >= ACCESS_RECHECK_SECONDS:
            self.checked_at = now
            ids = await database_sync_to_async(_visible_team_ids)(self.caller)
            self.team_ids = ids or set()
            return ids
        return self.team_ids

    async def forward_event(self, message):
        """A declared event from the channel layer, passed on if the user may see it."""
        event = events.declared(message["type"])
        private_to = message.get(events.PRIVATE_TO)
        wire = {
            "event": event.name,
            **{k: v for k, v in message.items() if k not in ("type", events.PRIVATE_TO)},
        }
        if not events.audience_allows(self.viewer_agent_id, private_to):
            return  # another agent's private line: not for a token bound to this one
        if await self.may_see(event, wire):
            await self.send_json(wire)

    @property
    def viewer_agent_id(self) -> int | None:
        """The agent this socket's caller acts as (a bound token), or None."""
        return self.caller.agent_id if self.caller is not None else None

    async def may_see(self, event, wire) -> bool:  # pragma: no cover - interface
        raise NotImplementedError


@serves(Audience.TEAM)
class TeamConsumer(LiveConsumer):
    """Streams one team's events to a user who may see that team."""

    async def connect(self):
        slug = self.scope["url_route"]["kwargs"]["slug"]
        self.caller = await database_sync_to_async(caller_for_scope)(self.scope)
        self.team = None
        if self.caller is not None:
            self.team = await database_sync_to_async(_team_of)(self.caller, slug)
        if self.team is None:
            await self.refuse(CLOSE_ACCESS_REFUSED)
            return
        if not await self.take_slot():
            await self.refuse(CLOSE_TOO_MANY_SOCKETS)
            return
        self.team_ids, self.checked_at = {self.team.id}, time.monotonic()
        self.group = events.team_group(self.team.id)
        self.sequence = asyncio.Lock()
        self.sent_messages: set[int] = set()  # by the catch-up on connect (see there)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Catch up on what happened between rendering the page (or losing the
        # connection) and joining the group: by sequence number from `after_seq`,
        # else the messages after `after` (an id). Live events up to the head read
        # here are dropped as duplicates.
        async with self.sequence:
            wires, self.seq = await database_sync_to_async(team_catch_up)(
                self.team.id,
                _after_id(self.scope),
                viewer_agent_id=self.viewer_agent_id,
                after_seq=_after_seq(self.scope),
            )
            for wire in wires:
                await self.send_json(wire)
            # Without `after_seq` the catch-up is the messages after an id, read after
            # the head: one committed between the two reads is sent here, and its
            # event (numbered past the head) comes live too. It is not sent twice.
            self.sent_messages = {
                wire["message"]["id"]
                for wire in wires
                if wire.get("event") == events.MessageCreated.name and "seq" not in wire
            }
        self.heard_at, self.head_wait = time.monotonic(), HEAD_CHECK_FIRST_SECONDS
        self.watcher = asyncio.ensure_future(self._watch_head())

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def forward_event(self, message):
        """Events in sequence: a duplicate (seq already sent) is dropped, and a gap is
        filled from the database before the event that revealed it is sent."""
        seq = message.get("seq")
        if seq is None:  # a transient event: streamed text
            await super().forward_event(message)
            return
        async with self.sequence:
            self.heard_at, self.head_wait = time.monotonic(), HEAD_CHECK_FIRST_SECONDS
            if seq <= self.seq:
                return
            if seq > self.seq + 1:
                await self._catch_up_to(seq - 1)
            self.seq = seq
            if self._sent_on_connect(message.get("type"), message):
                return
            await super().forward_event(message)

    def _sent_on_connect(self, name, payload: dict) -> bool:
        """Was this event's message sent by the catch-up on connect (see there)?"""
        if name != events.MessageCreated.name or not self.sent_messages:
            return False
        message_id = payload["message"]["id"]
        if message_id not in self.sent_messages:
            return False
        self.sent_messages.discard(message_id)
        return True

    async def _catch_up_to(self, upto: int):
        """Send the events after self.seq up to `upto` from the database (bounded as
        on connect; what is left out is counted in a `team.status`)."""
        wires = await database_sync_to_async(team_gap_fill)(
            self.team.id, self.seq, upto, viewer_agent_id=self.viewer_agent_id
        )
        self.seq = upto
        for wire in wires:
            if not self._sent_on_connect(wire.get("event"), wire):
                await self.send_json(wire)

    async def _watch_head(self):
        """Events lost at the end of a burst show no gap until the next one: a quiet
        socket reads the team's last sequence number now and then."""
        while True:
            await asyncio.sleep(self.head_wait)
            if time.monotonic() - self.heard_at < self.head_wait:
                continue  # events are arriving: their numbers show any gap
            self.head_wait = min(self.head_wait * 2, HEAD_CHECK_MAX_SECONDS)
            try:
                head = await team_head(self.team)
                if head > self.seq and await self.may_see(None, None):
                    async with self.sequence:
                        if head > self.seq:
                            await self._catch_up_to(head)
            except Exception as exc:  # a database blip: the next check tries again
                log.warning("Could not check team %s's live events: %s", self.team.id, exc)

    async def may_see(self, event, wire) -> bool:
        visible = await self.refresh_access()
        if visible is None or self.team.id not in visible:  # demoted, removed, deactivated
            await self.close(code=CLOSE_ACCESS_REFUSED)
            return False
        return True


@serves(Audience.INBOX)
class PMInboxConsumer(LiveConsumer):
    """Open PM requests appearing and leaving, for the teams this user may see."""

    async def connect(self):
        self.caller = await database_sync_to_async(caller_for_scope)(self.scope)
        if await self.refresh_access(force=True) is None:
            await self.refuse(CLOSE_ACCESS_REFUSED)
            return
        if not await self.take_slot():
            await self.refuse(CLOSE_TOO_MANY_SOCKETS)
            return
        await self.channel_layer.group_add(events.INBOX_GROUP, self.channel_name)
        await self.accept()
        # The open requests as of now, so the page can settle anything it missed.
        requests = await database_sync_to_async(_open_requests)(self.caller)
        await self.send_json(events.PMRequestOpenList(requests=requests).wire())

    async def disconnect(self, code):
        await self.channel_layer.group_discard(events.INBOX_GROUP, self.channel_name)

    async def may_see(self, event, wire) -> bool:
        team_id = event.team_of(wire)
        # A team given since the last check shows at once; one taken away
        # stops showing at the next periodic check.
        visible = await self.refresh_access(force=team_id not in self.team_ids)
        if visible is None:
            await self.close(code=CLOSE_ACCESS_REFUSED)
            return False
        return team_id in visible


def _visible_team_ids(caller: Caller | None) -> set[int] | None:
    """None when the caller may not use the live sockets at all (any more)."""
    if caller is None:
        return None
    # Fresh from the database: the scope's user or token is as it was at connect.
    caller = caller_refreshed(caller)
    if caller is None:
        return None
    return set(caller.teams().values_list("id", flat=True))


def _team_of(caller: Caller, slug: str) -> Team | None:
    try:
        return caller.team(slug)
    except NotFound:
        return None


# The last sequence number read per team in this process, and when: the quiet sockets
# of one team share one read a second.
# (Keyed by the team's unique folder too: a test database may give an id again.)
_heads: dict[tuple, tuple[float, int]] = {}


async def team_head(team: Team) -> int:
    key = (team.id, team.folder)
    checked_at, head = _heads.get(key, (0.0, 0))
    if time.monotonic() - checked_at >= HEAD_CHECK_FIRST_SECONDS:
        head = await database_sync_to_async(event_log.team_event_head)(team_id=team.id)
        _heads[key] = (time.monotonic(), head)
    return head


def _after_id(scope) -> int:
    value = parse_qs(scope.get("query_string", b"").decode()).get("after", ["0"])[0]
    # ASCII digits only, and few: "²".isdigit() is true and int() of 5,000 digits raises.
    return int(value) if re.fullmatch(r"[0-9]{1,18}", value) else 0


def _after_seq(scope) -> int | None:
    """The `after_seq` a client gave (the last sequence number it has), else None."""
    values = parse_qs(scope.get("query_string", b"").decode()).get("after_seq")
    if not values:
        return None
    return int(values[0]) if re.fullmatch(r"[0-9]{1,18}", values[0]) else 0


# The event a query's latest hop stands for, to replay on connect.
QUERY_EVENT_BY_HOP = {
    "ask": events.QueryAsked,
    "forward": events.QueryForwarded,
    "answer": events.QueryAnswered,
    "expire": events.QueryExpired,
}


def team_catch_up(
    team_id: int,
    after_id: int,
    viewer_agent_id: int | None = None,
    after_seq: int | None = None,
) -> tuple[list[dict], int]:
    """What a socket may have missed, as wire dicts, and the team's sequence number
    they bring it to.

    With `after_seq`: the events numbered after it, as published (each with its
    `seq` and `catch_up: true`), then the team's status. Without: the newest
    messages after `after_id`, the latest questions between agents as they stand,
    then the status. Either is bounded (CATCH_UP_MAX_MESSAGES events or messages,
    CATCH_UP_MAX_CHARS characters); the status carries the open PM request, how
    many were left out (`catch_up_omitted`; then the questions as they stand come
    too) and `head`, the sequence number it is current to. Events the viewer
    (`viewer_agent_id`, a bound token's agent) may not see are left out, as live."""
    team = Team.objects.get(pk=team_id)
    head = team.event_seq  # read first: what is committed later comes live
    if after_seq is not None:
        missed, omitted = _events_between(team_id, min(after_seq, head), head, viewer_agent_id)
        queries = _queries_as_they_stand(team) if omitted else []
    else:
        messages, omitted = selectors.team_messages_after_bounded(
            team=team,
            after_id=after_id,
            max_messages=CATCH_UP_MAX_MESSAGES,
            max_chars=CATCH_UP_MAX_CHARS,
        )
        missed = [
            event.wire()
            for event in (events.MessageCreated.of(m) for m in messages)
            if events.audience_allows(viewer_agent_id, event.private_to)
        ]
        queries = _queries_as_they_stand(team)
    return [*missed, *queries, _status(team, omitted, head)], head


def team_gap_fill(
    team_id: int, after_seq: int, upto_seq: int, viewer_agent_id: int | None = None
) -> list[dict]:
    """The events a connected socket missed between two sequence numbers; beyond the
    bounds, the newest of them, then the questions and the status as they stand."""
    missed, omitted = _events_between(team_id, after_seq, upto_seq, viewer_agent_id)
    if not omitted:
        return missed
    team = Team.objects.get(pk=team_id)
    return [*missed, *_queries_as_they_stand(team), _status(team, omitted, upto_seq)]


def _events_between(team_id, after_seq, upto_seq, viewer_agent_id) -> tuple[list[dict], int]:
    missed, omitted = event_log.team_events_after(
        team_id=team_id,
        after_seq=after_seq,
        upto_seq=upto_seq,
        viewer_agent_id=viewer_agent_id,
        max_events=CATCH_UP_MAX_MESSAGES,
        max_chars=CATCH_UP_MAX_CHARS,
    )
    return [{**wire, "catch_up": True} for wire in missed], omitted


def _queries_as_they_stand(team: Team) -> list[dict]:
    return [
        QUERY_EVENT_BY_HOP.get(q.hops[-1].get("kind") if q.hops else "", events.QueryAsked)(
            query=QueryOut.of(q)
        ).wire()
        for q in reversed(selectors.team_recent_queries(team=team))
    ]


def _status(team: Team, omitted: int, head: int) -> dict:
    request = selectors.team_open_pm_request(team=team)
    status = events.TeamStatusChanged.of(team)
    status.pm_request = PMRequestOut.of(request) if request else None
    status.catch_up_omitted = omitted
    status.head = head
    return status.wire()


def _open_requests(caller: Caller) -> list[PMRequestOut]:
    return [PMRequestOut.of(r) for r in selectors.open_pm_requests_in(teams=caller.teams())]
