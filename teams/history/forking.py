"""Fork a team: a new idle team holding the original's state as of one point of its
run (a message, or a turn's end), to change one thing there and go again.

The point is a message of the team (`at_message`: everything up to and including
it) or a turn (`at_turn`: up to its last message). A point inside a turn that had not
finished (an agent was mid-turn: its tool calls had written messages, files or
queries, but not its end) moves back to the last finished turn before it, so the
fork never holds half a turn; `Point.label` says where the fork really is.

The fork holds, as of that point: the conversation and the inboxes (authors and
times kept, ids new), the finished turns with their steps (their numbers kept), the
phase and the phase summaries, the plan (the summaries of later phases taken out),
the queries with their state then (answered, expired, or still open), the keepers and
their entries, the PM requests (answered then, or open), the anchors (each with a
revision saying "forked from <slug> at <point>"), the workspace files at their
revision then (teams.files.revisions; the revisions before it come along, sharing their
content), the agents (settings, hierarchy, counters as of then) and the team's
settings and MCP servers (a PM's fork gets a server without the host's variables
it was given: teams.integrations.mcp_servers.mcp_servers_copy). The copied turns'
count and cost are kept apart (`copied_turns`, `copied_spent_usd`): `spent_usd` is
what the fork itself spends; turn numbers go on from the copied ones, and the turn
budget counts them.

What is not recorded over time is taken as it is now: an agent's mesh hierarchy
when the fork is in the phase its trajectory is for (in an earlier phase it is
cleared, and Loom declares it afresh on the agent's next turn), its violations.
Consultations, model calls, tokens and webhooks are not copied. A file with no
recorded revision (written before revisions were kept) is not copied.

Nothing of the original changes. Edits (goal, plan, anchors, the text of the message
forked at) are applied to the fork before it is returned, in the same transaction:
a refused edit stores nothing."""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from django.db import transaction
from django.db.models import Max, Min, Q

from teams import services
from teams.errors import Conflict, InvalidInput, NotFound
from teams.files import revisions, workspace
from teams.history import cloning
from teams.integrations import mcp_servers
from teams.models import (
    Agent,
    Anchor,
    AnchorRevision,
    FileRevision,
    Keeper,
    KeeperEntry,
    Message,
    PMRequest,
    Query,
    Team,
    Turn,
    TurnStep,
    WorkspaceFile,
)

FINISHED = (Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.CANCELLED)
TEAM_SETTINGS = (
    "goal",
    "phases",
    "max_turns",
    "max_cost_usd",
    "tool_approvals",
    "phase_guide",
    "tool_access",
    "max_anchors",
    "anchor_value_limit",
)
AGENT_FIELDS = (*cloning.AGENT_COPIED, "context_updates", "violations")
SUMMARY_HEAD = re.compile(r"^\[Phase (?P<phase>.+?) complete\] ", re.S)
RECORD_LINES = ("The PM said: ", "Anchors pinned: ", "Files written: ")


@dataclass(frozen=True)
class Point:
    """Where a fork is: up to message id `message_id` (0: before any), at `at`."""

    message_id: int
    at: datetime | None
    label: str  # "message 12", "turn 5", "the start"
    turn_ids: frozenset[int]  # the finished turns it includes
    moved_back: bool = False


@dataclass(frozen=True)
class Edits:
    goal: str | None = None
    plan: str | None = None
    anchors: dict | None = None  # key -> new value, or None to delete
    message: str | None = None


# --- the point ---------------------------------------------------------------------


def _newest_id(team: Team, upto: int) -> int:
    return Message.objects.filter(team=team, id__lte=upto).aggregate(n=Max("id"))["n"] or 0


def _settle(team: Team, message_id: int, label: str, *, moved: bool = False) -> Point:
    """Move the point back until no turn is cut in half by it."""
    while True:
        mine = Message.objects.filter(team=team, id__lte=message_id, turn__isnull=False)
        touched = set(mine.values_list("turn_id", flat=True).distinct())
        later = set(
            Message.objects.filter(team=team, id__gt=message_id, turn_id__in=touched)
            .values_list("turn_id", flat=True)
            .distinct()
        )
        unfinished = set(
            Turn.objects.filter(pk__in=touched)
            .exclude(status__in=FINISHED)
            .values_list("pk", flat=True)
        )
        cut = later | unfinished
        if not cut:
            break
        first = Message.objects.filter(turn_id__in=cut).aggregate(n=Min("id"))["n"]
        message_id, moved = _newest_id(team, first - 1), True
    at = Message.objects.filter(pk=message_id).values_list("created_at", flat=True).first()
    included = frozenset(
        Turn.objects.filter(team=team, status__in=FINISHED)
        .filter(Q(messages__id__lte=message_id) | Q(messages__isnull=True, finished_at__lte=at))
        .values_list("pk", flat=True)
        .distinct()
        if at is not None
        else []
    )
    if moved:
        label = f"{label} (moved back to the last finished turn before it)"
    return Point(message_id, at, label, included, moved)


def fork_point(team: Team, *, at_message: int | None = None, at_turn: int | None = None) -> Point:
    """The point `at_message` or `at_turn` (one of them) names in `team`'s run; NotFound
    when the team has no such message or turn, InvalidInput when it is another team's
    or both or neither are given."""
    if (at_message is None) == (at_turn is None):
        raise InvalidInput(
            "Fork at one point: give at_message (a message id) or at_turn (a turn id).",
            field="at_message",
        )
    if at_message is not None:
        message = Message.objects.filter(pk=at_message).only("team_id").first()
        if message is None:
            raise NotFound(f"Team {team.slug!r} has no message {at_message}.")
        if message.team_id != team.pk:
            raise InvalidInput(
                f"Message {at_message} is not in team {team.slug!r}: fork a team at one of "
                "its own messages.",
                field="at_message",
            )
        return _settle(team, message.pk, f"message {message.pk}")
    turn = Turn.objects.filter(pk=at_turn).first()
    if turn is None:
        raise NotFound(f"Team {team.slug!r} has no turn {at_turn}.")
    if turn.team_id != team.pk:
        raise InvalidInput(
            f"Turn {at_turn} is not in team {team.slug!r}: fork a team at one of its own turns.",
            field="at_turn",
        )
    label = f"turn {turn.number}"
    own = Message.objects.filter(turn=turn).aggregate(first=Min("id"), last=Max("id"))
    if turn.status in FINISHED:
        last = own["last"]
        if last is None:
            last = (
                Message.objects.filter(team=team, created_at__lte=turn.finished_at).aggregate(
                    n=Max("id")
                )["n"]
                or 0
            )
        return _settle(team, last, label)
    before = (own["first"] or (turn.snapshot_message_id or 0) + 1) - 1
    return _settle(team, _newest_id(team, before), label, moved=True)


def start_point(team: Team) -> Point:
    """Before anything happened: no message, no turn (what a replay starts from)."""
    first = Turn.objects.filter(team=team).order_by("id").first()
    return Point(0, first.queued_at if first else None, "the start", frozenset())


# --- the fork ----------------------------------------------------------------------


def _plan_then(team: Team, point: Point) -> str:
    """The plan without the summaries of the phases completed after the point."""
    plan = team.plan
    later = Message.objects.filter(
        team=team, kind=Message.Kind.PHASE_SUMMARY, id__gt=point.message_id
    ).order_by("-id")
    for message in later:
        head = SUMMARY_HEAD.match(message.content)
        if not head:
            continue
        lines = message.content[head.end() :].split("\n")
        while lines and lines[-1].startswith(RECORD_LINES):
            lines.pop()
        line = f"- [{head['phase']} done] " + "\n".join(lines).strip()
        index = plan.rfind(line)
        if index >= 0:
            start = index - 1 if index > 0 and plan[index - 1] == "\n" else index
            plan = plan[:start] + plan[index + len(line) :]
    return plan


def _stage_files(point: Point, team: Team) -> tuple[Path | None, dict[str, FileRevision]]:
    """The files as of the point, written into a hidden staging folder."""
    if point.at is None:
        return None, {}
    latest = {
        path: row
        for path, row in revisions.revisions_as_of(team, until=point.at).items()
        if row.turn_id is None or row.turn_id in point.turn_ids
    }
    if not latest:
        return None, {}
    folder = workspace.workspaces_folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = folder / f".fork-{secrets.token_hex(8)}"
    staging.mkdir(mode=0o700)
    try:
        for path, row in latest.items():
            target = staging / path
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(bytes(row.blob.content))
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, latest


def team_fork(
    *,
    team: Team,
    slug: str,
    name: str | None = None,
    at_message: int | None = None,
    at_turn: int | None = None,
    point: Point | None = None,
    edits: Edits | None = None,
    user=None,
) -> Team:
    """A new idle team holding `team`'s state as of the point (see the module's
    docstring), with `edits` applied. A bad point, slug or edit stores nothing."""
    point = point or fork_point(team, at_message=at_message, at_turn=at_turn)
    edits = edits or Edits()
    if edits.message is not None and (at_message is None or point.moved_back):
        raise InvalidInput(
            "A message's text is replaced only in a fork at that message (at_message, "
            "outside an unfinished turn).",
            field="message",
        )
    slug = (slug or "").strip()
    name = team.name if name is None or not name.strip() else name.strip()
    services.text_check(name, field="name")
    cloning._slug_check(slug, name, team)
    staging, files = _stage_files(point, team)
    try:
        with transaction.atomic():
            fork = _fork_rows(team, point, slug=slug, name=name, user=user, files=files)
            _apply(fork, edits, point)
            if staging is not None:
                try:
                    os.rename(staging, workspace.default_root(fork))
                except OSError as exc:
                    raise Conflict(
                        f"The fork's workspace folder could not be made ({exc.strerror}); "
                        "nothing was stored: try again."
                    ) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return fork


def _changed_by(team: Team, point: Point) -> str:
    return f"forked from {team.slug} at {point.label.split(' (')[0]}"[:60]


def _fork_rows(source: Team, point: Point, *, slug, name, user, files) -> Team:
    messages = list(
        Message.objects.filter(team=source, id__lte=point.message_id)
        .filter(Q(turn__isnull=True) | Q(turn_id__in=point.turn_ids))
        .order_by("id")
    )
    summaries = sum(1 for m in messages if m.kind == Message.Kind.PHASE_SUMMARY)
    turns = list(Turn.objects.filter(pk__in=point.turn_ids).order_by("id"))
    copied = [t for t in turns if t.purpose == Turn.Purpose.CONVERSATION and t.status == "done"]
    fork = services.team_create(
        slug=slug,
        name=name,
        goal=source.goal,
        plan=_plan_then(source, point),
        phases=list(source.phases),
        max_turns=source.max_turns,
        max_cost_usd=source.max_cost_usd,
    )
    for field in TEAM_SETTINGS:
        setattr(fork, field, getattr(source, field))
    fork.phase_index = min(summaries, len(source.phases) - 1)
    fork.forked_from = source
    fork.forked_at = point.label[:120]
    fork.turn_count = fork.copied_turns = len(copied)
    fork.copied_spent_usd = sum((t.cost_usd for t in turns), Decimal("0"))
    fork.save()
    fork.managers.set(source.managers.all())
    fork.consultants.set(source.consultants.all())
    if user is not None and not user.is_superuser:
        fork.managers.add(user)
    by_superuser = user is None or user.is_superuser  # None: an operator's command
    mcp_servers.mcp_servers_copy(source=source, target=fork, by_superuser=by_superuser)

    agents = _fork_agents(source, fork, turns, files)
    turn_map = _fork_turns(fork, turns, agents)
    query_map = _fork_queries(source, fork, point, agents)
    message_map = _fork_messages(fork, messages, agents, turn_map, query_map)
    # A turn's snapshot is the newest message it read: the fork's copy of it.
    for old, new in turn_map.items():
        snapshot = next((t.snapshot_message_id for t in turns if t.pk == old), None)
        if snapshot:
            kept = [m for m in message_map if m <= snapshot]
            Turn.objects.filter(pk=new.pk).update(
                snapshot_message_id=message_map[max(kept)] if kept else 0
            )
    _fork_keepers(source, fork, point, agents, message_map)
    _fork_pm_requests(source, fork, point, agents, turn_map)
    _fork_anchors(source, fork, point)
    _fork_files(source, fork, point, files, agents, turn_map)
    return fork


def _fork_agents(source: Team, fork: Team, turns: list[Turn], files) -> dict[int, Agent]:
    phase = fork.phase
    agents = {}
    for agent in source.agents.order_by("position", "id"):
        own = [t for t in turns if t.agent_id == agent.pk]
        done = [t for t in own if t.status == Turn.Status.DONE]
        values = {field: getattr(agent, field) for field in AGENT_FIELDS}
        if agent.trajectory_phase == phase and own:
            values["trajectory_phase"] = phase
        else:  # the hierarchy of a later phase: Loom declares this one afresh
            values.update(trajectory="", tactic="", action="", trajectory_phase="")
        values["turns"] = len(done)
        values["last_context_update_turn"] = min(agent.last_context_update_turn, len(done))
        values["drift_score"] = next(
            (t.drift_score for t in reversed(own) if t.drift_score is not None), 0
        )
        values["files_touched"] = [p for p in agent.files_touched if p in files]
        if not turns:  # the start: nothing has happened to any agent yet
            values.update(context_updates=0, violations=0)
        agents[agent.pk] = Agent.objects.create(
            team=fork, name=agent.name, **{k: v for k, v in values.items() if k != "name"}
        )
    return agents


def _fork_turns(fork: Team, turns: list[Turn], agents) -> dict[int, Turn]:
    made = {}
    for turn in turns:
        copy = Turn.objects.create(
            team=fork,
            agent=agents[turn.agent_id],
            purpose=turn.purpose,
            status=turn.status,
            outcome=turn.outcome,
            phase=turn.phase,
            number=turn.number,
            attempts=turn.attempts,
            model=turn.model,
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
            cache_creation_tokens=turn.cache_creation_tokens,
            cache_read_tokens=turn.cache_read_tokens,
            cost_usd=turn.cost_usd,
            drift_score=turn.drift_score,
            error=turn.error,
            started_at=turn.started_at,
            finished_at=turn.finished_at,
        )
        copy.queued_at = turn.queued_at
        made[turn.pk] = copy
    Turn.objects.bulk_update(list(made.values()), ["queued_at"])
    steps = TurnStep.objects.filter(turn_id__in=list(made)).order_by("turn_id", "index")
    copies = []
    for step in steps:
        copies.append(
            TurnStep(
                turn=made[step.turn_id],
                index=step.index,
                kind=step.kind,
                tool_name=step.tool_name,
                content=step.content,
                ends_turn=step.ends_turn,
                end_reason=step.end_reason,
                request=step.request,
                request_digest=step.request_digest,
                input_tokens=step.input_tokens,
                output_tokens=step.output_tokens,
                cache_creation_tokens=step.cache_creation_tokens,
                cache_read_tokens=step.cache_read_tokens,
            )
        )
    TurnStep.objects.bulk_create(copies)
    return made


def _fork_queries(source: Team, fork: Team, point: Point, agents) -> dict[int, Query]:
    made = {}
    if point.at is None:
        return made
    asked = Message.objects.filter(team=source, id__lte=point.message_id, query__isnull=False)
    ids = set(asked.values_list("query_id", flat=True))
    for query in Query.objects.filter(team=source, created_at__lte=point.at).order_by("id"):
        if query.pk not in ids and query.origin_id is not None:
            continue  # asked by a turn the fork does not hold
        answered = query.answered_at is not None and query.answered_at <= point.at
        expired = query.status == Query.Status.EXPIRED and query.expires_at <= point.at
        status = (
            Query.Status.ANSWERED
            if answered
            else Query.Status.EXPIRED
            if expired
            else Query.Status.OPEN
        )
        hops = query.hops
        if status == Query.Status.OPEN:
            hops = [h for h in hops if h.get("kind") not in ("answer", "expire")]
        copy = Query.objects.create(
            team=fork,
            origin=agents.get(query.origin_id),
            target=agents.get(query.target_id),
            question=query.question,
            hops=hops,
            enrichments=query.enrichments,
            status=status,
            answer=query.answer if answered else "",
            answered_by=agents.get(query.answered_by_id) if answered else None,
            answered_at=query.answered_at if answered else None,
            max_hops=query.max_hops,
            ttl_seconds=query.ttl_seconds,
            expires_at=query.expires_at,
        )
        copy.created_at = query.created_at
        made[query.pk] = copy
    Query.objects.bulk_update(list(made.values()), ["created_at"])
    return made


def _fork_messages(fork, messages, agents, turn_map, query_map) -> dict[int, int]:
    copies = Message.objects.bulk_create(
        Message(
            team=fork,
            author=agents.get(m.author_id),
            author_label=m.author_label,
            recipient=agents.get(m.recipient_id),
            kind=m.kind,
            phase=m.phase,
            content=m.content,
            turn=turn_map.get(m.turn_id),
            query=query_map.get(m.query_id),
        )
        for m in messages
    )
    if copies and copies[0].pk is None:  # a backend that returns no ids
        copies = list(Message.objects.filter(team=fork).order_by("id"))
    for copy, original in zip(copies, messages, strict=True):
        copy.created_at = original.created_at
    Message.objects.bulk_update(copies, ["created_at"], batch_size=500)
    return {m.pk: c.pk for m, c in zip(messages, copies, strict=True)}


def _fork_keepers(source, fork, point, agents, message_map) -> None:
    if point.at is None:
        return
    for keeper in Keeper.objects.filter(team=source, created_at__lte=point.at).order_by("id"):
        entries = list(keeper.entries.order_by("position"))
        if any(e.message_id and e.message_id not in message_map for e in entries):
            continue  # made from messages the fork does not hold
        copy = Keeper.objects.create(
            team=fork,
            agent=agents.get(keeper.agent_id),
            topic=keeper.topic,
            index_entry=keeper.index_entry,
        )
        Keeper.objects.filter(pk=copy.pk).update(created_at=keeper.created_at)
        KeeperEntry.objects.bulk_create(
            KeeperEntry(
                keeper=copy,
                message_id=message_map.get(e.message_id),
                position=e.position,
                role=e.role,
                content=e.content,
            )
            for e in entries
        )


def _fork_pm_requests(source, fork, point, agents, turn_map) -> None:
    if point.at is None:
        return
    rows = PMRequest.objects.filter(team=source, created_at__lte=point.at).order_by("id")
    open_one = None
    for request in rows:
        if request.turn_id is not None and request.turn_id not in turn_map:
            continue
        answered = request.answered_at is not None and request.answered_at <= point.at
        copy = PMRequest.objects.create(
            team=fork,
            agent=agents.get(request.agent_id),
            turn=turn_map.get(request.turn_id),
            question=request.question,
            kind=request.kind,
            budget=request.budget,
            status=request.status if answered else PMRequest.Status.CANCELLED,
            answer=request.answer if answered else "",
            answered_by=request.answered_by if answered else None,
            tool_name=request.tool_name,
            tool_use_id=request.tool_use_id,
            arguments=request.arguments,
            input_schema=request.input_schema,
            approved_arguments=request.approved_arguments if answered else None,
            note=request.note if answered else "",
            answered_at=request.answered_at if answered else None,
        )
        PMRequest.objects.filter(pk=copy.pk).update(created_at=request.created_at)
        if not answered and request.status != PMRequest.Status.CANCELLED:
            open_one = copy
    if open_one is not None:  # the one open then is open in the fork
        PMRequest.objects.filter(pk=open_one.pk).update(status=PMRequest.Status.OPEN)


def _fork_anchors(source: Team, fork: Team, point: Point) -> None:
    history = AnchorRevision.objects.filter(team=source)
    if point.at is not None:
        history = history.filter(created_at__lte=point.at)
    latest: dict[str, AnchorRevision] = {}
    for revision in history.order_by("id"):
        latest[revision.key] = revision
    now = {a.key: a for a in Anchor.objects.filter(team=source)}
    names = set(source.agents.values_list("name", flat=True))
    changed_by = _changed_by(source, point)
    for key, revision in sorted(latest.items()):
        if revision.deleted:
            continue
        current = now.get(key)
        if current is not None and current.value == revision.value:
            source_kind, phase, by = current.source, current.phase, current.updated_by
        else:
            agent = revision.changed_by in names
            source_kind = Anchor.Source.AGENT if agent else Anchor.Source.PM
            phase, by = "", revision.changed_by
        anchor = Anchor.objects.create(
            team=fork, key=key, value=revision.value, updated_by=by, source=source_kind, phase=phase
        )
        AnchorRevision.objects.create(
            team=fork, key=key, anchor=anchor, value=revision.value, changed_by=changed_by
        )


def _fork_files(source, fork, point, files, agents, turn_map) -> None:
    if not files:
        return
    history = FileRevision.objects.filter(
        team=source, path__in=list(files), created_at__lte=point.at
    ).order_by("path", "number")
    counts: dict[str, int] = {}
    for row in history:
        if row.number > files[row.path].number:
            continue
        FileRevision.objects.create(
            team=fork,
            path=row.path,
            blob_id=row.blob_id,
            agent=agents.get(row.agent_id),
            turn=turn_map.get(row.turn_id),
            number=row.number,
            note=row.note,
        )
        counts[row.path] = counts.get(row.path, 0) + 1
    WorkspaceFile.objects.bulk_create(
        WorkspaceFile(
            team=fork,
            path=path,
            size=row.blob.size,
            agent=agents.get(row.agent_id),
            turn=turn_map.get(row.turn_id),
            writes=counts.get(path, 1),
        )
        for path, row in files.items()
    )


def _apply(fork: Team, edits: Edits, point: Point) -> None:
    """The PM's edits, checked as the same edits elsewhere are."""
    fields = []
    if edits.goal is not None:
        services.human_text_check(edits.goal, field="goal")
        fork.goal, fields = edits.goal, [*fields, "goal"]
    if edits.plan is not None:
        services.text_check(edits.plan, field="plan")
        fork.plan, fields = edits.plan, [*fields, "plan"]
    if fields:
        from teams.errors import validated

        validated(fork)
        fork.save(update_fields=[*fields, "updated_at"])
    for key, value in (edits.anchors or {}).items():
        if value is None:
            services.anchor_delete(team=fork, key=key, changed_by="PM (fork edit)")
        else:
            if not isinstance(value, str):
                raise InvalidInput(
                    f"Anchor {key!r}: a value is text, or null to delete it.", field="anchors"
                )
            services.anchor_save(team=fork, key=key, value=value, changed_by="PM (fork edit)")
    if edits.message is not None:
        services.human_text_check(edits.message, field="message")
        if not edits.message.strip():
            raise InvalidInput("The message's new text is empty.", field="message")
        last = Message.objects.filter(team=fork).order_by("-id").first()
        if last is None:
            raise InvalidInput("The fork holds no message to replace.", field="message")
        last.content = edits.message
        last.save(update_fields=["content"])


def made_message(fork: Team) -> str:
    """What the faces say of a fork."""
    source = fork.forked_from.slug if fork.forked_from else "?"
    said = (
        f"Forked team {fork.slug!r} from {source!r} at {fork.forked_at}: "
        f"{fork.messages.count()} messages, {fork.copied_turns} turns, phase {fork.phase}."
    )
    stripped = mcp_servers.mcp_servers_stripped(source=fork.forked_from, copy=fork)
    if stripped:
        said += " " + mcp_servers.WITHOUT_VARIABLES.format(names=", ".join(stripped))
    return said


def fork_counters(team: Team) -> dict:
    """The copied part apart from the fork's own."""
    return {
        "copied_turns": team.copied_turns,
        "own_turns": max(team.turn_count - team.copied_turns, 0),
        "copied_spent_usd": team.copied_spent_usd,
        "own_spent_usd": team.spent_usd,
    }


__all__ = [
    "Edits",
    "Point",
    "fork_counters",
    "fork_point",
    "made_message",
    "start_point",
    "team_fork",
]
