"""Wake-ups and live events over the channel layer.

The database is the truth; these messages only wake workers and browsers. Each is
sent after the transaction that wrote its rows commits, so nobody is told about a
row they cannot read yet, and a lost message costs nothing but latency.
"""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger("loom.events")

TURNS_CHANNEL = "loom.turns"


def team_group(team_id: int) -> str:
    return f"team-{team_id}"


INBOX_GROUP = "pm-inbox"


def _send(send, *args):
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(getattr(layer, send))(*args)
    except Exception:  # a wake-up that fails is repaired by the sweeper
        log.warning("Channel layer %s failed", send, exc_info=True)


def after_commit(func, *args):
    transaction.on_commit(lambda: func(*args))


def wake_worker(turn_id: int) -> None:
    after_commit(_send, "send", TURNS_CHANNEL, {"type": "turn.queued", "turn_id": turn_id})


def publish(team_id: int, event: str, **payload) -> None:
    """Tell the team's live viewers that `event` (e.g. "message.created") happened."""
    after_commit(_send, "group_send", team_group(team_id), {"type": event, **payload})


def publish_inbox(event: str, **payload) -> None:
    after_commit(_send, "group_send", INBOX_GROUP, {"type": event, **payload})


def publish_now(team_id: int, event: str, **payload) -> None:
    """For transient events with no row behind them (streamed text)."""
    _send("group_send", team_group(team_id), {"type": event, **payload})
