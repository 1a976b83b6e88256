"""Every live event the site publishes, declared once, and the wake-ups of workers.

An event is a pydantic model: its name, its audience (the team's group, the PM
inbox group, or both) and its payload fields. `publish` takes an event value, never
a free string, and refuses one that is not declared; the consumers derive their
handlers from the declarations, so a new event cannot be forgotten by a consumer.

The database is the truth; these messages only wake workers and browsers. Each is
sent after the transaction that wrote its rows commits, so nobody is told about a
row they cannot read yet, and a lost message costs nothing but latency."""

from __future__ import annotations

import enum
import logging
import threading
from functools import partial
from typing import ClassVar

from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.db import transaction
from pydantic import BaseModel

from teams.event_payloads import MessageOut, PMRequestOut, QueryOut, TeamStatusOut, TurnOut

log = logging.getLogger("loom.events")

TURNS_CHANNEL = "loom.turns"
INBOX_GROUP = "pm-inbox"


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


class Audience(enum.Flag):
    NONE = 0
    TEAM = enum.auto()  # /ws/teams/<slug>/: people who may see the team
    INBOX = enum.auto()  # /ws/pm/: every PM, filtered to the teams each may see


class UndeclaredEvent(LookupError):
    """An event that is not declared here: a bug, refused loudly."""


class Event(BaseModel):
    """Base of the declared events: the fields are the payload."""

    name: ClassVar[str]
    audience: ClassVar[Audience]
    # Sent at once, with no row behind it (streamed text).
    transient: ClassVar[bool] = False
    # Sent by a consumer to its own client on connect, never published.
    on_connect_only: ClassVar[bool] = False

    def wire(self) -> dict:
        """The JSON a browser gets: the fields that were given, plus the name."""
        return {"event": self.name, **self.model_dump(mode="json", include=self.model_fields_set)}

    @classmethod
    def team_of(cls, wire: dict) -> int | None:
        """The team an inbox event concerns, so the inbox shows it only to its PMs."""
        return None


DECLARED: dict[str, type[Event]] = {}


def declare(cls: type[Event]) -> type[Event]:
    if cls.name in DECLARED and DECLARED[cls.name] is not cls:
        raise RuntimeError(f"Two events are named {cls.name!r}.")
    DECLARED[cls.name] = cls
    return cls


def declared(name: str) -> type[Event]:
    try:
        return DECLARED[name]
    except KeyError:
        raise UndeclaredEvent(f"No event named {name!r} is declared in teams.events.") from None


def handler_name(name: str) -> str:
    """The consumer method Channels calls for a message of this type."""
    return name.replace(".", "_")


def for_audience(audience: Audience) -> list[type[Event]]:
    return [e for e in DECLARED.values() if e.audience & audience and not e.on_connect_only]


# --- the events ------------------------------------------------------------------


@declare
class TeamStatusChanged(TeamStatusOut, Event):
    """Status, phase, counters and the actions offered. On connect it also carries
    the PM request open now (or null)."""

    name = "team.status"
    audience = Audience.TEAM
    pm_request: PMRequestOut | None = None
    # On connect only: missed messages the catch-up left out (beyond its bounds).
    catch_up_omitted: int | None = None


@declare
class TeamProgress(TeamStatusOut, Event):
    """The team list's view of a team (status, phase, counters against budgets),
    sent to every PM who may see it whenever its status changes or a turn ends."""

    name = "team.progress"
    audience = Audience.INBOX

    @classmethod
    def team_of(cls, wire: dict) -> int | None:
        return wire["team_id"]


@declare
class TurnStarted(Event):
    name = "turn.started"
    audience = Audience.TEAM
    turn_id: int
    agent: str
    number: int


@declare
class TextDelta(Event):
    name = "text.delta"
    audience = Audience.TEAM
    transient = True
    turn_id: int
    agent: str
    text: str


@declare
class MessageCreated(Event):
    name = "message.created"
    audience = Audience.TEAM
    message: MessageOut


@declare
class TurnFinished(Event):
    name = "turn.finished"
    audience = Audience.TEAM
    turn: TurnOut
    team: TeamStatusOut


class _PMRequestEvent(Event):
    audience = Audience.TEAM | Audience.INBOX
    request: PMRequestOut

    @classmethod
    def team_of(cls, wire: dict) -> int | None:
        return wire["request"]["team_id"]


@declare
class PMRequestOpened(_PMRequestEvent):
    name = "pm_request.opened"


@declare
class PMRequestAnswered(_PMRequestEvent):
    name = "pm_request.answered"


@declare
class PMRequestOpenList(Event):
    """The inbox socket's first message: the requests open now."""

    name = "pm_request.open_list"
    audience = Audience.INBOX
    on_connect_only = True
    requests: list[PMRequestOut]


class _QueryEvent(Event):
    audience = Audience.TEAM
    query: QueryOut


@declare
class QueryAsked(_QueryEvent):
    name = "query.asked"


@declare
class QueryForwarded(_QueryEvent):
    name = "query.forwarded"


@declare
class QueryAnswered(_QueryEvent):
    name = "query.answered"


@declare
class QueryExpired(_QueryEvent):
    name = "query.expired"


@declare
class BudgetWarning(Event):
    """80% of a team's turn or cost budget is used (once per budget; teams.budgets)."""

    name = "budget.warning"
    audience = Audience.TEAM | Audience.INBOX
    team: str  # the slug
    team_id: int
    budget: str  # "cost" or "turns"
    used: int | float
    limit: int | float
    percent: float

    @classmethod
    def team_of(cls, wire: dict) -> int | None:
        return wire["team_id"]


# --- sending ---------------------------------------------------------------------

_pending = threading.local()


def publish(event: Event, *, team_id: int) -> None:
    """Tell the event's audience, once the current transaction commits (at once for
    a transient event)."""
    if DECLARED.get(event.name) is not type(event):
        raise UndeclaredEvent(
            f"{type(event).__name__} ({event.name!r}) is not declared in teams.events."
        )
    if event.on_connect_only:
        raise UndeclaredEvent(f"{event.name!r} is sent on connect only, never published.")
    wire = event.wire()
    message = {"type": event.name, **{k: v for k, v in wire.items() if k != "event"}}
    sends = []
    if event.audience & Audience.TEAM:
        sends.append(("group_send", (team_group(team_id), message)))
    if event.audience & Audience.INBOX:
        sends.append(("group_send", (INBOX_GROUP, message)))
    if event.transient:
        _send_batch(sends)
    else:
        for send in sends:
            _after_commit(*send)


def wake_worker(turn_id: int) -> None:
    _after_commit("send", (TURNS_CHANNEL, {"type": "turn.queued", "turn_id": turn_id}))


def _after_commit(send: str, args: tuple) -> None:
    """Queue a send for when the current transaction commits.

    Everything one transaction announces goes out in one hop to the event loop, in
    order. A batch whose transaction rolled back is dropped with it."""
    connection = transaction.get_connection()
    flush = getattr(_pending, "flush", None)
    registered = flush is not None and any(entry[1] is flush for entry in connection.run_on_commit)
    if not registered or not connection.in_atomic_block:
        batch: list = []
        flush = _pending.flush = partial(_send_batch, batch)
        flush.batch = batch
        batch.append((send, args))
        transaction.on_commit(flush)
        return
    flush.batch.append((send, args))


def _send_batch(batch) -> None:
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all():
        for send, args in batch:
            try:
                await getattr(layer, send)(*args)
            except ChannelFull:
                # Nobody is draining the channel (no worker running): the rows are
                # safe and the sweeper repeats the wake-up once a worker listens.
                log.debug("Channel %s is full; the sweeper will repeat the wake-up", args[0])

    try:
        async_to_sync(send_all)()
    except Exception as exc:  # a lost wake-up is repaired by the sweeper
        log.warning("Channel layer send failed: %s", exc)
