"""What a process keeps of each agent's last request, so the next one reads only what
is new.

An agent's history only grows within a phase, and what could change a line already read
(an offload, an edited message, a renamed agent, a new phase) changes the key, so the
next build reads everything again. The lines about questions (open, answered, expired)
are rendered afresh on every build. What is kept is an optimisation, never the truth: a
build in a process that kept nothing (another worker) gives the same request, byte for
byte. The anchors' block is kept under the stamp the turn's claim read
(teams.engine.claims), and the tools by the registry (tools.registry.forget)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from teams.conversation import questions
from teams.engine import history_rows
from teams.engine.system_text import ANCHOR_FIELDS, anchors_block
from teams.models import Agent, Anchor, Message, Query, Team
from tools import registry

KEEP_HISTORY = True  # off: every build reads all it needs (as a worker that kept nothing)
KEPT_AGENTS = 512  # the agents whose last history a process keeps, least recent dropped


@dataclass(frozen=True)
class _Kept:
    """An agent's history as read for its last request (a History), under the key it
    was read with."""

    key: tuple
    history: History


@dataclass
class History:
    """An agent's history for a request: its rows, each row's (role, text) as render
    gives it, and the positions of the rows whose line depends on more than the row
    (`_special`: a question's line, a PM's nudge), so that what looks at them need
    not walk the whole history."""

    rows: list[Message]
    lines: list[tuple[str, str | None]]
    special: list[int]
    ids: list[int]  # the rows' ids


_kept: OrderedDict[tuple[int, int], _Kept] = OrderedDict()
_kept_anchors: OrderedDict[int, tuple[str, str]] = OrderedDict()  # team: (stamp, block)
_kept_lock = threading.Lock()


def forget(team: Team | None = None, agent: Agent | None = None) -> None:
    """Drop what this process keeps (of one agent, of a team, or all)."""
    with _kept_lock:
        for team_id, agent_id in list(_kept):
            if (team is None or team_id == team.id) and (agent is None or agent_id == agent.id):
                del _kept[team_id, agent_id]
        if agent is None:
            for team_id in list(_kept_anchors):
                if team is None or team_id == team.id:
                    del _kept_anchors[team_id]
    if agent is None:
        registry.forget(team)


def _dynamic(message: Message) -> bool:
    """A line about a question: whether and how it shows depends on the query's state
    now (open, answered, forwarded, expired), so it is rendered on every build."""
    return message.query_id is not None


def _special(message: Message) -> bool:
    return message.query_id is not None or message.kind == Message.Kind.NUDGE


def agent_history(
    agent: Agent,
    team: Team,
    until_id: int | None,
    phase: str,
    seen: int | None,
    agents: list[tuple[int, str, str]],
) -> History:
    """The agent's history for a request (as history_messages), rendered.

    With what this process kept of the agent's last request, the database still says
    which rows the history has (their ids: offloaded ones drop out, a late commit
    comes in), and only the rows not read before are read whole; when the history
    only grew (the common case) the kept lines are taken as they are, and only the
    questions' lines rendered again. The key holds what changes a line already
    rendered: the team's context version (an edited message) and the roster (a
    renamed agent), with the team's creation time (ids may come again after a
    rollback)."""
    key = (team.created_at, team.context_version, tuple(agents))
    kept = None
    keep = KEEP_HISTORY and until_id is not None
    if keep:
        with _kept_lock:
            kept = _kept.get((team.id, agent.id))
        if kept is not None and kept.key != key:
            kept = None
    if kept is None:
        rows = history_rows.history_messages(agent, team, until_id, phase, seen)
        history = _history_of(rows, [history_rows.render(m, agent) for m in rows])
    else:
        history = _history_since(agent, team, phase, seen, until_id, kept.history)
    if keep:
        with _kept_lock:
            _kept[team.id, agent.id] = _Kept(key, history)
            _kept.move_to_end((team.id, agent.id))
            while len(_kept) > KEPT_AGENTS:
                _kept.popitem(last=False)
    return history


def _history_since(
    agent: Agent, team: Team, phase: str, seen: int | None, until_id: int, kept: History
) -> History:
    """The history from what was kept of the last request and the rows read since."""
    ids = history_rows.history_ids(agent, team, phase, seen, until_id)
    kept_ids = kept.ids
    grew = ids[: len(kept_ids)] == kept_ids
    known = set() if grew else set(kept_ids)
    fresh = ids[len(kept_ids) :] if grew else [i for i in ids if i not in known]
    read = {}
    if fresh:  # the rows written since (or committed late): the ids say which
        messages = list(
            Message.objects.filter(id__in=fresh).select_related("author").order_by("id")
        )
        _refresh_queries([m for m in messages if m.query_id is not None])  # as prefetched
        read = {m.id: m for m in questions.delivered(messages)}
    if grew:
        rows, lines, special, row_ids = [*kept.rows], [*kept.lines], [*kept.special], [*kept_ids]
        dynamic = [i for i in special if _dynamic(rows[i])]
        _refresh_queries([rows[i] for i in dynamic])
        for i in dynamic:
            lines[i] = history_rows.render(rows[i], agent)
        for message in (read[i] for i in fresh if i in read):
            if _special(message):
                special.append(len(rows))
            rows.append(message)
            row_ids.append(message.id)
            lines.append(history_rows.render(message, agent))
        return History(rows, lines, special, row_ids)
    # Rows dropped out or came in between: the kept ones by id, the rest as read.
    by_id = {m.id: (m, line) for m, line in zip(kept.rows, kept.lines, strict=True)}
    rows = [r for r in (by_id[i][0] if i in by_id else read.get(i) for i in ids) if r]
    _refresh_queries([m for m in rows if _dynamic(m) and m.id in by_id])
    lines = [
        by_id[m.id][1] if m.id in by_id and not _dynamic(m) else history_rows.render(m, agent)
        for m in rows
    ]
    return _history_of(rows, lines)


def _history_of(rows: list[Message], lines: list[tuple[str, str | None]]) -> History:
    special = [i for i, m in enumerate(rows) if _special(m)]
    return History(rows, lines, special, [m.id for m in rows])


def _refresh_queries(messages: list[Message]) -> None:
    """The queries of kept rows as they are now (one statement, none without)."""
    if not messages:
        return
    queries = Query.objects.in_bulk({m.query_id for m in messages})
    for message in messages:
        message.query = queries.get(message.query_id)


def anchors_block_at(team: Team, stamp: str) -> str:
    """The anchors' block as `stamp` (their stamp, read by the turn's claim) says they
    were: the block this process rendered under it, or read afresh."""
    if stamp == "[]":
        return ""  # no anchors: nothing to read
    if KEEP_HISTORY:
        with _kept_lock:
            kept = _kept_anchors.get(team.id)
        if kept is not None and kept[0] == stamp:
            return kept[1]
    anchors = list(Anchor.objects.filter(team=team).order_by("key"))
    block = anchors_block(team, anchors)
    # Kept under the stamp only when the rows read are the ones it names (an anchor
    # may have changed since the claim: then this build shows it, and keeps nothing).
    read = sorted([getattr(a, f) for f in ANCHOR_FIELDS] for a in anchors)
    if KEEP_HISTORY and read == sorted(json.loads(stamp)):
        with _kept_lock:
            _kept_anchors[team.id] = (stamp, block)
            _kept_anchors.move_to_end(team.id)
            while len(_kept_anchors) > KEPT_AGENTS:
                _kept_anchors.popitem(last=False)
    return block
