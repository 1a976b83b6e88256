"""Every live event the site publishes, declared once, and the wake-ups of workers.

An event is a pydantic model: its name, its audience (the team's group, the PM
inbox group, or both) and its payload fields. `publish` takes an event value, never
a free string, and refuses one that is not declared; the consumers derive their
handlers from the declarations, so a new event cannot be forgotten by a consumer.

The database is the truth; these messages only wake workers and browsers. Each is
sent after the transaction that wrote its rows commits, so nobody is told about a
row they cannot read yet, and a lost message costs nothing but latency. An event for
a team's socket (not a transient one) is also numbered in the team's sequence and
kept (teams.live.event_log) in that transaction: its `seq` lets a socket see what it
missed and read it back."""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from functools import partial
from typing import ClassVar

from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.db import transaction
from django.dispatch import Signal
from pydantic import BaseModel, Field

from teams.live import event_log
from teams.live.event_payloads import (
    AnchorOut,
    ConsultationBatchOut,
    KeeperOut,
    MessageOut,
    PMRequestOut,
    QueryOut,
    TeamStatusOut,
    TurnOut,
    WorkspaceFileOut,
)
from teams.models import Message

log = logging.getLogger("loom.events")

TURNS_CHANNEL = "loom.turns"
INBOX_GROUP = "pm-inbox"
# The key of a published message naming the agent a private event is for (never sent
# to a browser or program: the consumers take it out).
PRIVATE_TO = "private_to"


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
    # The agent (its id) whose private line this event carries (an inbox message: a
    # peer message, a delivered question, an answer, a note to one agent), or None for
    # the team's. Not part of the payload: `audience_allows` decides who gets it.
    private_to: int | None = Field(default=None, exclude=True)

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
        raise UndeclaredEvent(
            f"No event named {name!r} is declared in teams.live.events."
        ) from None


def handler_name(name: str) -> str:
    """The consumer method Channels calls for a message of this type."""
    return name.replace(".", "_")


def audience_allows(viewer_agent_id: int | None, private_to: int | None) -> bool:
    """May a caller acting as `viewer_agent_id` (None: a person, or a team token not
    bound to an agent) receive an event private to `private_to` (None: not private)?
    A token bound to an agent reads that agent's private lines only, as its /context."""
    return private_to is None or viewer_agent_id is None or viewer_agent_id == private_to


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
    # On connect only: the team's sequence number this status is current to.
    head: int | None = None


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

    @classmethod
    def of(cls, message: Message) -> MessageCreated:
        """The event of a new message: private to its recipient when it has one."""
        return cls(message=MessageOut.of(message), private_to=message.recipient_id)


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
    """80% of a team's turn or cost budget, or of an agent's own cost budget, is used
    (once per budget; teams.run.budgets)."""

    name = "budget.warning"
    audience = Audience.TEAM | Audience.INBOX
    team: str  # the slug
    team_id: int
    budget: str  # "cost" or "turns"
    used: int | float
    limit: int | float
    percent: float
    # The agent whose own cost budget it is; not given (not in the payload) for the team's.
    agent: str | None = None

    @classmethod
    def team_of(cls, wire: dict) -> int | None:
        return wire["team_id"]


# --- the live view's panels: each change, once committed ------------------------


@declare
class ConsultationClosed(Event):
    """A consultant answered (or failed): its ask as it stands now, every consultant
    of the batch side by side (teams.integrations.consultations.consultation_close)."""

    name = "consultation.closed"
    audience = Audience.TEAM
    batch: ConsultationBatchOut


@declare
class FileWritten(Event):
    """An agent wrote a workspace file (teams.files.workspace.file_write); `files` is how
    many files the team's workspace holds now (the header's count)."""

    name = "file.written"
    audience = Audience.TEAM
    file: WorkspaceFileOut
    files: int


@declare
class AnchorSaved(Event):
    """An anchor pinned or its value replaced (teams.services.anchor_save)."""

    name = "anchor.saved"
    audience = Audience.TEAM
    anchor: AnchorOut
    anchors: int  # how many the team holds now


@declare
class AnchorDeleted(Event):
    """An anchor unpinned (teams.services.anchor_delete)."""

    name = "anchor.deleted"
    audience = Audience.TEAM
    key: str
    anchors: int


@declare
class KeeperCreated(Event):
    """An agent offloaded part of its context to a new keeper
    (teams.conversation.keepers.offload)."""

    name = "keeper.created"
    audience = Audience.TEAM
    keeper: KeeperOut


@declare
class AgentIntentChanged(Event):
    """An agent's hierarchy changed (declare_intent, map_context, a new phase's
    trajectory, an edit in the admin or the API): the drift card's levels and score."""

    name = "agent.intent"
    audience = Audience.TEAM
    agent: str
    trajectory: str
    tactic: str
    action: str
    drift_score: int

    @classmethod
    def of(cls, agent) -> AgentIntentChanged:
        return cls(
            agent=agent.name,
            trajectory=agent.trajectory,
            tactic=agent.tactic,
            action=agent.action,
            drift_score=agent.drift_score,
        )


# --- the PM's steering, and the team asking for help --------------------------------


class _Steered(Event):
    """The PM steered the run (teams.run.steering): `agent` was chosen, nudged or sat for,
    by `by`. A nudge's text is not in it: the message.created of the nudge carries it,
    private to its agent."""

    audience = Audience.TEAM
    agent: str
    by: str


@declare
class NextSpeakerChosen(_Steered):
    name = "steer.next_speaker"


@declare
class AgentNudged(_Steered):
    name = "steer.nudge"


@declare
class SeatTaken(_Steered):
    name = "steer.seat"
    turn_id: int


@declare
class DriftAlert(Event):
    """An agent in significant drift two of its turns in a row (once per episode;
    teams.run.steering.drift_alert_check): the live view and the PM inbox say so."""

    name = "drift.alert"
    audience = Audience.TEAM | Audience.INBOX
    team: str  # the slug
    team_id: int
    agent: str
    score: int
    scores: list[int]  # its last two turns' scores, oldest first
    text: str

    @classmethod
    def team_of(cls, wire: dict) -> int | None:
        return wire["team_id"]


# --- sending ---------------------------------------------------------------------

_pending = threading.local()

# The running event loop this process's sends go through (teams.engine.worker gives
# its own): one loop, whose channel-layer connections every send reuses. Without one
# each send runs async_to_sync, which from a turn's thread means a new event loop, a
# thread and a fresh Redis connection per batch (a third of a turn's CPU, measured).
_send_loop: asyncio.AbstractEventLoop | None = None
SEND_TIMEOUT = 10.0


def send_through(loop: asyncio.AbstractEventLoop | None) -> None:
    """Send this process's events through `loop` (None: each send on its own)."""
    global _send_loop
    _send_loop = loop


def publish(event: Event, *, team_id: int) -> None:
    """Tell the event's audience, once the current transaction commits (at once for
    a transient event)."""
    if DECLARED.get(event.name) is not type(event):
        raise UndeclaredEvent(
            f"{type(event).__name__} ({event.name!r}) is not declared in teams.live.events."
        )
    if event.on_connect_only:
        raise UndeclaredEvent(f"{event.name!r} is sent on connect only, never published.")
    wire = event.wire()
    message = {"type": event.name, **{k: v for k, v in wire.items() if k != "event"}}
    if event.private_to is not None:
        message[PRIVATE_TO] = event.private_to
    if event.audience & Audience.TEAM and not event.transient:
        # Numbered and kept in this transaction: a socket that misses it reads it back.
        together = getattr(_numbering, "records", None)
        if together is not None:  # with the others of numbered_together, at its end
            together.append((team_id, (event.name, wire, event.private_to), message))
        else:
            message["seq"] = event_log.live_event_record(
                team_id=team_id, name=event.name, wire=wire, private_to=event.private_to
            )
    sends = []
    if event.audience & Audience.TEAM:
        sends.append(("group_send", (team_group(team_id), message)))
    if event.audience & Audience.INBOX:
        sends.append(("group_send", (INBOX_GROUP, message)))
    if event.transient:
        _send_batch(sends)
    else:
        _after_commit(sends)


_numbering = threading.local()


@contextmanager
def numbered_together():
    """The team events published within are numbered and kept at its end, a team's in
    one statement, not one each: use it inside the transaction that writes what they
    announce, around the publishing (their numbers still come in publishing order,
    and they are sent when the transaction commits, as always)."""
    if getattr(_numbering, "records", None) is not None:
        yield  # an outer one numbers them
        return
    records: list[tuple[int, tuple[str, dict, int | None], dict]] = []
    _numbering.records = records
    try:
        yield
    finally:
        _numbering.records = None
    if records and not transaction.get_connection().needs_rollback:
        for team_id in dict.fromkeys(team_id for team_id, _, _ in records):
            mine = [(event, message) for t, event, message in records if t == team_id]
            seqs = event_log.live_events_record(team_id=team_id, events=[e for e, _ in mine])
            for seq, (_, message) in zip(seqs, mine, strict=True):
                message["seq"] = seq


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# Sent as a worker's wake-up is queued (`turn_id`): each receiver returns fields the
# wake-up carries (teams.observability.telemetry, tracing on: the trace context the
# turn was queued in). The domain says what happened; observers subscribe to it.
wake_queued = Signal()


def wake_worker(turn_id: int) -> None:
    wake = {"type": "turn.queued", "turn_id": turn_id}
    for _receiver, fields in wake_queued.send(sender=None, turn_id=turn_id):
        wake.update(fields or {})
    _after_commit([("send", (TURNS_CHANNEL, wake))])


def _after_commit(sends: list) -> None:
    """Queue `sends` for when the current transaction commits (at once outside one).

    Django's on_commit keeps them with the savepoint they were published in: a
    savepoint that rolls back drops its events with its rows."""
    number = _pending.registered = getattr(_pending, "registered", 0) + 1
    transaction.on_commit(partial(_send_committed, number, sends))


def _send_committed(number: int, sends: list) -> None:
    # Only the last send a thread registered waits for the loop; the ones before it are
    # chained there in order, so a transaction costs one wait, not one per event.
    _send_batch(sends, wait=number == _pending.registered)


def _send_batch(batch: list, *, wait: bool = True) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _send_loop
    try:
        if loop is not None and loop.is_running() and not _in_event_loop():
            # The thread's previous batch, when it went through this same loop: one
            # sent through a loop since stopped never finishes, and waiting on it
            # would hold every later send of the thread until the timeout.
            previous_loop, after = getattr(_pending, "previous", (None, None))
            if previous_loop is not loop:
                after = None
            future = asyncio.run_coroutine_threadsafe(_send_all(layer, batch, after), loop)
            _pending.previous = (loop, future)
            if wait:
                future.result(SEND_TIMEOUT)
        else:
            async_to_sync(_send_all)(layer, batch, None)
    except Exception as exc:  # a lost wake-up is repaired by the sweeper
        log.warning("Channel layer send failed: %s", exc)


async def _send_all(layer, batch: list, after: Future | None) -> None:
    """Send `batch` in order, after the thread's previous batch (`after`) is out."""
    if after is not None and not after.done():
        with suppress(Exception):  # its failure was logged by its own sends
            await asyncio.wrap_future(after)
    for send, args in batch:
        try:
            await getattr(layer, send)(*args)
        except ChannelFull:
            # Nobody is draining the channel (no worker running): the rows are
            # safe and the sweeper repeats the wake-up once a worker listens.
            log.debug("Channel %s is full; the sweeper will repeat the wake-up", args[0])
        except Exception as exc:  # a lost wake-up is repaired by the sweeper
            log.warning("Channel layer send failed: %s", exc)
