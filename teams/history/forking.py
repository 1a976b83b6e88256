"""Fork a team: a new idle team holding the original's state as of one point of its
run (a message, or a turn's end), to change one thing there and go again.

The point is a message of the team (`at_message`, its id: everything up to and
including it) or a turn (`at_turn`: up to its last message). People read a point as
"message N", N its place among the messages the pages show (teams.selectors.SHOWN),
the numbering of the live view and the compare page. A point inside a turn that had not
finished (an agent was mid-turn: its tool calls had written messages, files or
queries, but not its end) moves back to the last finished turn before it, so the
fork never holds half a turn; `Point.label` says where the fork really is.

What it holds and leaves out follows the one list of a team's state,
teams.history.team_state. As of that point: the conversation and the inboxes (authors
and times kept, ids new), the finished turns with their steps (their numbers kept) and
consultations, the phase and the phase summaries, the plan (the summaries of later
phases taken out), the queries with their state then (answered, expired, or still
open; the messages, steps and keepers that cite a query cite the fork's copy of it),
the keepers and their entries, the PM requests (answered then, or open), the anchors
(with those the PM pinned before the next message, such as an answer pinned as an
anchor; each with a revision saying "forked from <slug> at <point>"), the workspace
files at their revision then (teams.files.revisions; the revisions before it come
along, sharing their content), the agents (settings, hierarchy, counters as of then),
the team's settings (budgets, tool access and approvals, phase guide, stuck checks),
managers, consultants and MCP servers (a PM's fork gets a server without the host's
variables it was given: teams.integrations.mcp_servers.mcp_servers_copy). The copied
turns' count and cost are kept apart (`copied_turns`, `copied_spent_usd`): `spent_usd`
is what the fork itself spends; turn numbers go on from the copied ones, and the turn
budget counts them.

What is not recorded over time is taken as it is now: an agent's mesh hierarchy
when the fork is in the phase its trajectory is for (otherwise Loom declares the
fork's phase's trajectory, as it does when a phase begins), its violations. Model
calls, live events, tokens and webhooks are not copied (team_state says why). A file
with no recorded revision (written before revisions were kept) is not copied.

Nothing of the original changes. Edits (goal, plan, anchors, the text of the message
forked at) are applied to the fork before it is returned, in the same transaction:
a refused edit stores nothing."""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.db import transaction
from django.db.models import Q

from teams import selectors, services
from teams.conversation import hierarchy
from teams.errors import Conflict, InvalidInput
from teams.files import revisions, workspace
from teams.history import cloning, fork_limits, team_state
from teams.history.fork_points import Point, fork_point, start_point
from teams.integrations import mcp_servers
from teams.models import (
    Agent,
    Anchor,
    AnchorRevision,
    Consultation,
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

AGENT_FIELDS = (
    *team_state.AGENT_SETTINGS,
    *team_state.AGENT_HIERARCHY,
    "context_updates",
    "violations",
)
CONSULTATION_FIELDS = (
    "profile_id",
    "batch",
    "prompt",
    "task_type",
    "relevant_files",
    "focus_areas",
    "context",
    "custom_prompt",
    "status",
    "output",
    "flagged_files",
    "model",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "duration_seconds",
    "error",
)
SUMMARY_HEAD = re.compile(r"^\[Phase (?P<phase>.+?) complete\] ", re.S)
RECORD_LINES = ("The PM said: ", "Anchors pinned: ", "Files written: ")


@dataclass(frozen=True)
class Edits:
    goal: str | None = None
    plan: str | None = None
    anchors: dict | None = None  # key -> new value, or None to delete
    message: str | None = None


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
    limited: bool = True,
) -> Team:
    """A new idle team holding `team`'s state as of the point (see the module's
    docstring), with `edits` applied. A bad point, slug or edit stores nothing; nor
    does a fork `user` may not make, or one over the limits (teams.history.fork_limits;
    `limited=False`: the caller, a replay, checked them)."""
    point = point or fork_point(team, at_message=at_message, at_turn=at_turn)
    if limited:
        size = fork_limits.messages_up_to(team, point.message_id)
        fork_limits.fork_allowed(team=team, messages=size, user=user)
    edits = edits or Edits()
    if edits.message is not None and (at_message is None or point.moved_back):
        raise InvalidInput(
            "A message's text is replaced only in a fork at that message (at_message, "
            "outside an unfinished turn).",
            field="message",
        )
    slug = (slug or "").strip()
    if name is None or not name.strip():
        name = cloning.copy_name(team.name, f"fork of {point.label.split(' (')[0]}")
    name = name.strip()
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
    for field in team_state.TEAM_SETTINGS:
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
    query_map, rekey = _fork_queries(source, fork, point, agents)
    turn_map = _fork_turns(fork, turns, agents, rekey)
    message_map = _fork_messages(fork, messages, agents, turn_map, query_map, rekey)
    # A turn's snapshot is the newest message it read: the fork's copy of it.
    for old, new in turn_map.items():
        snapshot = next((t.snapshot_message_id for t in turns if t.pk == old), None)
        if snapshot:
            kept = [m for m in message_map if m <= snapshot]
            Turn.objects.filter(pk=new.pk).update(
                snapshot_message_id=message_map[max(kept)] if kept else 0
            )
    _fork_keepers(source, fork, point, agents, message_map, rekey)
    _fork_pm_requests(source, fork, point, agents, turn_map, rekey)
    _fork_consultations(source, fork, agents, turn_map)
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
        values["turns"] = len(done)
        values["last_context_update_turn"] = min(agent.last_context_update_turn, len(done))
        values["drift_score"] = next(
            (t.drift_score for t in reversed(own) if t.drift_score is not None), 0
        )
        values["files_touched"] = [p for p in agent.files_touched if p in files]
        if not turns:  # the start: nothing has happened to any agent yet
            values.update(context_updates=0, violations=0)
        if agent.trajectory_phase != phase or not own:
            # Another phase's hierarchy: the fork's agent begins its phase as Loom
            # begins one (hierarchy.agent_phase_begin), so its drift card never shows
            # another phase's intent, and its next turn reads what the original's did.
            values.update(
                trajectory=hierarchy.phase_trajectory(team=fork, role=agent.role, phase=phase),
                tactic="",
                action="",
                trajectory_phase=phase,
                context_updates=values["context_updates"] + 1,
                last_context_update_turn=len(done),
            )
        agents[agent.pk] = Agent.objects.create(
            team=fork, name=agent.name, **{k: v for k, v in values.items() if k != "name"}
        )
    return agents


def _fork_turns(fork: Team, turns: list[Turn], agents, rekey) -> dict[int, Turn]:
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
                content=rekey(step.content),
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


def _rekeyer(keys: dict[str, str]):
    """A function that writes each copied query's new key where its old one was, in a
    text or in the texts of a JSON value (a step's content blocks)."""
    if not keys:
        return lambda value: value
    pattern = re.compile("|".join(re.escape(old) for old in keys))

    def rekey(value):
        if isinstance(value, str):
            return pattern.sub(lambda found: keys[found[0]], value)
        if isinstance(value, list):
            return [rekey(item) for item in value]
        if isinstance(value, dict):
            return {name: rekey(item) for name, item in value.items()}
        return value

    return rekey


def _fork_queries(source: Team, fork: Team, point: Point, agents):
    """The queries as of the point, and the rekeyer of the texts that cite them."""
    made = {}
    if point.at is None:
        return made, _rekeyer({})
    asked = Message.objects.filter(team=source, id__lte=point.message_id, query__isnull=False)
    ids = set(asked.values_list("query_id", flat=True))
    keys: dict[str, str] = {}
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
        keys[query.key] = copy.key
    Query.objects.bulk_update(list(made.values()), ["created_at"])
    return made, _rekeyer(keys)


def _fork_messages(fork, messages, agents, turn_map, query_map, rekey) -> dict[int, int]:
    copies = Message.objects.bulk_create(
        Message(
            team=fork,
            author=agents.get(m.author_id),
            author_label=m.author_label,
            recipient=agents.get(m.recipient_id),
            kind=m.kind,
            phase=m.phase,
            content=rekey(m.content),
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


def _fork_keepers(source, fork, point, agents, message_map, rekey) -> None:
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
                content=rekey(e.content),
            )
            for e in entries
        )


def _fork_pm_requests(source, fork, point, agents, turn_map, rekey) -> None:
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
            question=rekey(request.question),
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


def _fork_consultations(source, fork, agents, turn_map) -> None:
    """The consultations of the copied turns, as the consultations panel showed them."""
    rows = Consultation.objects.filter(team=source, turn_id__in=list(turn_map)).order_by("id")
    for row in rows:
        copy = Consultation.objects.create(
            team=fork,
            agent=agents.get(row.agent_id),
            turn=turn_map[row.turn_id],
            **{field: getattr(row, field) for field in CONSULTATION_FIELDS},
        )
        Consultation.objects.filter(pk=copy.pk).update(created_at=row.created_at)


def _next_message_at(source: Team, point: Point):
    """When the message after the point was written (None: there is none)."""
    return (
        Message.objects.filter(team=source, id__gt=point.message_id)
        .order_by("id")
        .values_list("created_at", flat=True)
        .first()
    )


def _fork_anchors(source: Team, fork: Team, point: Point) -> None:
    names = set(source.agents.values_list("name", flat=True))
    history = AnchorRevision.objects.filter(team=source)
    if point.at is not None:
        # The PM's own changes belong to the point up to the next message: an answer
        # pinned as an anchor is saved just after the answer's message.
        by_pm = ~Q(changed_by__in=names)
        after = _next_message_at(source, point)
        if after is not None:
            by_pm &= Q(created_at__lt=after)
        history = history.filter(Q(created_at__lte=point.at) | by_pm)
    latest: dict[str, AnchorRevision] = {}
    for revision in history.order_by("id"):
        latest[revision.key] = revision
    now = {a.key: a for a in Anchor.objects.filter(team=source)}
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


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def made_message(fork: Team) -> str:
    """What the faces say of a fork: its messages counted as the pages show them, and
    what it left out."""
    source = fork.forked_from.slug if fork.forked_from else "?"
    shown = Message.objects.filter(team=fork).filter(selectors.SHOWN).count()
    said = (
        f"Forked team {fork.slug!r} from {source!r} at {fork.forked_at}: "
        f"{_count(shown, 'message')}, {_count(fork.copied_turns, 'turn')}, "
        f"phase {fork.phase}. Not copied: {'; '.join(team_state.left_out('fork'))}."
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
