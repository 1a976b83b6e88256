"""Wake-ups and live events over the channel layer.

The database is the truth; these messages only wake workers and browsers. Each is
sent after the transaction that wrote its rows commits, so nobody is told about a
row they cannot read yet, and a lost message costs nothing but latency.
"""

import logging
import threading
from functools import partial

from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger("loom.events")

TURNS_CHANNEL = "loom.turns"


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


INBOX_GROUP = "pm-inbox"


_pending = threading.local()


def after_commit(send: str, *args) -> None:
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


def wake_worker(turn_id: int) -> None:
    after_commit("send", TURNS_CHANNEL, {"type": "turn.queued", "turn_id": turn_id})


def publish(team_id: int, event: str, **payload) -> None:
    """Tell the team's live viewers that `event` (e.g. "message.created") happened."""
    after_commit("group_send", team_group(team_id), {"type": event, **payload})


def publish_inbox(event: str, **payload) -> None:
    after_commit("group_send", INBOX_GROUP, {"type": event, **payload})


def publish_now(team_id: int, event: str, **payload) -> None:
    """For transient events with no row behind them (streamed text)."""
    _send_batch([("group_send", (team_group(team_id), {"type": event, **payload}))])
