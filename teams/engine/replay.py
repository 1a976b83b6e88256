"""Replay a team's recorded run: a new team, made as the original was at its start
(teams.history.forking.start_point), runs again turn by turn in this process while Loom
builds every prompt and runs every tool for real, but no model is asked. Each model
call is answered with the recorded reply of the same turn and step; each smart
retrieval with the recorded answer; each consultation with the recorded output; each
run_command and MCP tool call with the original call's recorded result (no command
runs, no MCP server is contacted, even for a call the PM approves). The PM's recorded
answers are given to the replay's requests in order, and the PM's posts are posted
before the turn that first read them in the original.

Each model step's request is compared with the original's (their digests, teams.
requests.request_digest, after the replay's own ids of queries, keepers and
consultations are written as the original's): the replay stops at the first step
whose request differs, whose recorded reply calls a tool no longer offered, or whose
turn is another agent's, and its report (Replay) says which turn, which agent and
what differs, with a unified diff of the two requests as text. A replay costs no
tokens: every reply has zero usage.

The replay's team is left as the replay left it: finished when the original was, or
paused at the turn that diverged (that turn failed, saying so), to be resumed with
real models from there."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from teams import services
from teams.conversation import approvals, pm_requests
from teams.engine import loop
from teams.engine.providers import replaying
from teams.engine.reply import DEFAULT_MAX_TOKENS, ModelReply
from teams.errors import InvalidInput, LoomError, ModelError
from teams.files.changes import command_files_replay
from teams.history import cloning, fork_limits, forking
from teams.history.model_requests import (
    request_digest,
    request_pack,
    request_text,
    request_unpack,
)
from teams.lib.catalog import Usage
from teams.models import (
    DENY,
    Consultation,
    Keeper,
    Message,
    ModelCall,
    PMRequest,
    Query,
    Replay,
    Team,
    Turn,
    TurnStep,
)
from teams.run import team_actions
from tools.base import ToolResult
from tools.consult import ReadConsultation

WORKER = "replay"
MAX_DIFF_LINES = 400
# A hook for tests: a function (request dict) -> request dict applied to every request
# the replay builds, to change a prompt without changing Loom's code.
request_hook = None


class _Diverged(Exception):
    pass


@dataclass
class _Ids:
    """The replay's ids of queries, keepers and consultations, and the original's at
    the same place in order of creation."""

    source: Team
    team: Team
    maps: dict = field(default_factory=dict)

    def refresh(self) -> None:
        def pairs(model, attr):
            old = list(
                model.objects.filter(team=self.source).order_by("id").values_list(attr, flat=True)
            )
            new = list(
                model.objects.filter(team=self.team).order_by("id").values_list(attr, flat=True)
            )
            return list(zip(old, new, strict=False))

        self.maps = {
            "query": pairs(Query, "key"),
            "keeper": pairs(Keeper, "id"),
            "consultation": pairs(Consultation, "id"),
            "message": pairs(Message, "id"),
        }

    def _table(self, kind: str, to_original: bool) -> dict:
        return {(n if to_original else o): (o if to_original else n) for o, n in self.maps[kind]}

    def translate(self, value, *, to_original: bool):
        queries = self._table("query", to_original)
        keepers = {str(k): str(v) for k, v in self._table("keeper", to_original).items()}
        consultations = {
            str(k): str(v) for k, v in self._table("consultation", to_original).items()
        }

        messages = {str(k): str(v) for k, v in self._table("message", to_original).items()}

        def text(s: str) -> str:
            s = re.sub(r"q-[0-9a-f]{12}", lambda m: queries.get(m.group(), m.group()), s)
            s = re.sub(
                r"(?<![Kk]eeper )(?<![Cc]onsultation )#(\d+)",
                lambda m: "#" + messages.get(m.group(1), m.group(1)),
                s,
            )
            s = re.sub(
                r"((?:keeper_id=|keeper_id\": |[Kk]eeper #?))(\d+)",
                lambda m: m.group(1) + keepers.get(m.group(2), m.group(2)),
                s,
            )
            s = re.sub(
                r"([Cc]onsultations )(\d+(?:, \d+)*)",
                lambda m: (
                    m.group(1) + ", ".join(consultations.get(n, n) for n in m.group(2).split(", "))
                ),
                s,
            )
            return re.sub(
                r"((?:consultation_id=|consultation_id\": |[Cc]onsultation #?|"
                + re.escape(ReadConsultation.name)
                + r"\())(\d+)",
                lambda m: m.group(1) + consultations.get(m.group(2), m.group(2)),
                s,
            )

        def walk(v, key=None):
            if isinstance(v, str):
                return text(v)
            if isinstance(v, list):
                return [walk(x) for x in v]
            if isinstance(v, dict):
                return {k: walk(x, k) for k, x in v.items()}
            if isinstance(v, int) and not isinstance(v, bool):
                if key == "keeper_id":
                    return int(keepers.get(str(v), v))
                if key == "consultation_id":
                    return int(consultations.get(str(v), v))
            return v

        return walk(value)


class _TurnModel:
    def __init__(self, replayer: Replayer):
        self.replayer = replayer

    def respond(
        self, *, model, system, messages, tools, max_tokens=DEFAULT_MAX_TOKENS, on_text=None
    ):
        return self.replayer.model_step(
            system=system, messages=messages, tools=tools, on_text=on_text
        )


class _SmartModel:
    def __init__(self, replayer: Replayer):
        self.replayer = replayer

    def respond(
        self, *, model, system, messages, tools, max_tokens=DEFAULT_MAX_TOKENS, on_text=None
    ):
        return self.replayer.tool_question()


class Replayer:
    """Runs one replay (see the module's docstring)."""

    def __init__(self, row: Replay, source: Team, team: Team):
        self.row, self.source, self.team = row, source, team
        self.originals = list(
            Turn.objects.filter(team=source).select_related("agent").order_by("id")
        )
        self.requests = list(PMRequest.objects.filter(team=source).order_by("id"))
        self.posts = _pm_posts(source, self.requests)
        self.ids = _Ids(source, team)
        self.current: tuple[Turn, Turn] | None = None
        self.asked: dict[tuple[int, str], int] = {}
        self.consultations: dict[str, list[Consultation]] = {}
        self.divergence: str = ""

    # --- what the providers ask -------------------------------------------------

    def provider(self, purpose: str):
        if purpose == ModelCall.Purpose.SMART_RETRIEVAL:
            return _SmartModel(self)
        return _TurnModel(self)

    def _diverge(self, reason: str, diff: str = "") -> ModelError:
        turn, original = self.current
        if not self.divergence:
            self.divergence = reason
            self.row.status = Replay.Status.DIVERGED
            self.row.diverged_turn = original.number
            self.row.diverged_agent = turn.agent.name
            self.row.reason = reason
            self.row.diff = diff
        return ModelError(f"Replay stopped: {reason}")

    def model_step(self, *, system, messages, tools, on_text=None) -> ModelReply:
        turn, original = self.current
        if self.divergence:
            raise ModelError(f"Replay stopped: {self.divergence}")
        index = TurnStep.objects.filter(turn=turn, kind=TurnStep.Kind.MODEL).count()
        recorded = list(
            TurnStep.objects.filter(turn=original, kind=TurnStep.Kind.MODEL).order_by("index")
        )
        who = f"turn {original.number} ({turn.agent.name})"
        if index >= len(recorded):
            raise self._diverge(
                f"{who} makes model call {index + 1}; the original made {len(recorded)}."
            )
        step = recorded[index]
        request = {"system": system, "messages": messages, "tools": tools}
        if request_hook is not None:
            request = request_hook(request)
        self.ids.refresh()
        mine = self.ids.translate(request, to_original=True)
        theirs = request_unpack(step.request)
        if theirs is None:
            raise self._diverge(f"{who}: the original's model call {index + 1} kept no request.")
        if request_digest(mine) != (step.request_digest or request_digest(theirs)):
            diff = _diff(theirs, {**theirs, **request_unpack(request_pack(mine))})
            raise self._diverge(
                f"{who}, model call {index + 1}: the request differs from the original's.", diff
            )
        offered = {t.get("name") for t in tools}
        gone = [
            b["name"]
            for b in step.content
            if b.get("type") == "tool_use" and b.get("name") not in offered
        ]
        if gone:
            raise self._diverge(
                f"{who}, model call {index + 1}: the recorded reply calls "
                f"{', '.join(sorted(set(gone)))}, no longer offered."
            )
        content = self.ids.translate(step.content, to_original=False)
        if on_text is not None:
            for block in content:
                if block.get("type") == "text" and block.get("text"):
                    on_text(block["text"])
        self.row.model_steps += 1
        uses = any(b.get("type") == "tool_use" for b in content)
        return ModelReply(
            content=content,
            stop_reason="tool_use" if uses else "end_turn",
            model=original.model or turn.model,
            usage=Usage(),
        )

    def tool_question(self) -> ModelReply:
        turn, original = self.current
        index = ModelCall.objects.filter(turn=turn).count()
        recorded = list(ModelCall.objects.filter(turn=original).order_by("id"))
        if index >= len(recorded) or not recorded[index].reply:
            raise self._diverge(
                f"turn {original.number} ({turn.agent.name}): a tool asks the model a question "
                "the original's run has no recorded answer for."
            )
        self.ids.refresh()
        text = self.ids.translate(recorded[index].reply, to_original=False)
        return ModelReply(
            content=[{"type": "text", "text": text}],
            stop_reason="end_turn",
            model=recorded[index].model,
            usage=Usage(),
        )

    def consult(self, profile, frame):
        from teams.engine.consult import StructuredReply

        turn, original = self.current
        key = (turn.pk, profile.name)
        index = self.asked.get(key, 0)
        self.asked[key] = index + 1
        recorded = self.consultations.get(profile.name, [])
        if index >= len(recorded):
            raise ModelError(f"Replay: no recorded answer of consultant {profile.name}.")
        row = recorded[index]
        if row.status != Consultation.Status.DONE or row.output is None:
            raise ModelError(row.error or f"Consultant {profile.name} failed.")
        data = {k: v for k, v in row.output.items() if k not in ("responder", "timestamp")}
        return StructuredReply(data=data, model=row.model, usage=Usage(), seconds=0.0)

    def recorded_result(self, name: str, tool_use_id: str, *, writes_files: bool) -> ToolResult:
        """The original's result of this call of tool `name` (run_command's, an MCP
        tool's: a replay never runs a command or calls a server again), found by its
        tool_use_id, without the PM's approval notice (the loop adds the replay's own).
        `writes_files`: the files the call changed in the original are written into the
        replay's workspace (teams.files.changes). No recorded result: the replay stops
        at this call, saying why."""
        turn, original = self.current
        key = (turn.pk, f"tool:{name}", tool_use_id)
        index = self.asked.get(key, 0)
        self.asked[key] = index + 1
        steps = list(
            TurnStep.objects.filter(turn=original, kind=TurnStep.Kind.TOOL, tool_name=name)
            .order_by("index")
            .values_list("content", "created_at")
        )
        mine = [i for i, (content, _) in enumerate(steps) if _use_id(content) == tool_use_id]
        if index >= len(mine):
            reason = (
                f"turn {original.number} ({turn.agent.name}): the original has no recorded "
                f"result of {name} for this call, and a replay never calls an MCP server or "
                "runs a command itself."
            )
            self._diverge(reason)
            return ToolResult(f"Error: not run: {reason}", is_error=True)
        position = mine[index]
        block = steps[position][0][0]
        if writes_files:
            command_files_replay(
                original=original,
                team=self.team,
                agent=turn.agent,
                turn=turn,
                after=steps[position - 1][1] if position else None,
                until=steps[position][1],
            )
        text = _without_notice(str(block.get("content", "")), original, tool_use_id)
        return ToolResult(text, is_error=bool(block.get("is_error")))

    # --- the run ----------------------------------------------------------------

    def run(self, *, until_turn: int | None = None, limit: int = 2000) -> Replay:
        team_actions.team_start(team=self.team)
        answered = posted = 0
        try:
            for _ in range(limit):
                request = PMRequest.objects.filter(
                    team=self.team, status=PMRequest.Status.OPEN
                ).first()
                if request is not None:
                    if answered >= len(self.requests) or not _was_answered(self.requests[answered]):
                        self._end(Replay.Status.MATCHED)
                        break
                    _answer(request, self.requests[answered])
                    answered += 1
                    continue
                turn = (
                    Turn.objects.filter(team=self.team, status=Turn.Status.QUEUED)
                    .select_related("agent")
                    .order_by("id")
                    .first()
                )
                original = self._original_of(turn, until_turn) if turn is not None else None
                if original is None:
                    break
                posted = self._replay_turn(turn, original, posted)
                if self.divergence:
                    break
        except _Diverged as exc:
            self._diverge(str(exc))
        return self._close()

    def _original_of(self, turn: Turn, until_turn: int | None) -> Turn | None:
        """The original turn the queued `turn` replays; None when the replay ends
        before it (stopped at `until_turn`, or where the original stopped)."""
        position = Turn.objects.filter(team=self.team, id__lt=turn.id).count()
        if until_turn is not None and turn.number > until_turn:
            self._end(Replay.Status.STOPPED)
            return None
        if position >= len(self.originals):
            self.current = (turn, turn)
            raise _Diverged(
                f"turn {turn.number} ({turn.agent.name}): the replay goes on after the "
                f"original's last turn ({len(self.originals)} turns)."
            )
        original = self.originals[position]
        if original.status not in (Turn.Status.DONE, Turn.Status.FAILED) and not (
            TurnStep.objects.filter(turn=original).exists()
        ):  # the original stopped before this turn ran: so does the replay
            self._end(Replay.Status.MATCHED)
            return None
        return original

    def _replay_turn(self, turn: Turn, original: Turn, posted: int) -> int:
        """Run `turn` as `original` ran, after the PM's posts it saw; the posts made."""
        self.current = (turn, original)
        # Read here: ask_multi asks its consultants from threads of their own.
        self.consultations = {}
        for row in Consultation.objects.filter(turn=original).select_related("profile"):
            name = row.profile.name if row.profile else ""
            self.consultations.setdefault(name, []).append(row)
        if original.agent.name != turn.agent.name or original.purpose != turn.purpose:
            raise _Diverged(
                f"turn {original.number}: the original's turn was "
                f"{original.agent.name}'s ({original.purpose}), the replay's is "
                f"{turn.agent.name}'s ({turn.purpose})."
            )
        snapshot = original.snapshot_message_id or 0
        while posted < len(self.posts) and self.posts[posted].pk <= snapshot:
            services.message_add(
                team=self.team,
                content=self.posts[posted].content,
                kind=Message.Kind.PM,
                author_label=self.posts[posted].author_label,
            )
            posted += 1
        token = replaying.set(self)
        try:
            loop.run_turn(turn.id, WORKER)
        finally:
            replaying.reset(token)
        return posted

    def _close(self) -> Replay:
        """The replay's row as the run left it."""
        if self.row.status == Replay.Status.RUNNING:
            replayed = Turn.objects.filter(team=self.team).count()
            later = [t for t in self.originals[replayed:] if t.status == Turn.Status.DONE]
            if later:
                original = later[0]
                self.row.status = Replay.Status.DIVERGED
                self.row.diverged_turn = original.number
                self.row.diverged_agent = original.agent.name
                self.row.reason = (
                    f"the replay ended after {replayed} turns; the original went on with turn "
                    f"{original.number} ({original.agent.name})."
                )
            else:
                self.row.status = Replay.Status.MATCHED
        self.row.turns_replayed = Turn.objects.filter(
            team=self.team, status=Turn.Status.DONE
        ).count()
        self.row.finished_at = timezone.now()
        self.row.save()
        return self.row

    def _end(self, status: str) -> None:
        """Stop here: the replay's queued turn is withdrawn, the team paused."""
        self.row.status = status
        try:
            team_actions.team_pause(team=Team.objects.get(pk=self.team.pk))
        except LoomError:
            pass  # not running (waiting for the PM): it stays as it is


def _use_id(content) -> str | None:
    return content[0].get("tool_use_id") if content else None


def _without_notice(text: str, original: Turn, tool_use_id: str) -> str:
    """A recorded result without what the PM's approval put before it in the original
    (approvals.approved_notice): the replay's loop puts its own there, from the same
    recorded answer, and the model must read it once."""
    request = approvals.approval_for(original, tool_use_id)
    if request is None or request.status != PMRequest.Status.ANSWERED:
        return text
    decision, _edited, _note = approvals.approval_outcome(request)
    if decision == DENY:
        return text
    notice = approvals.approved_notice(request, request.arguments or {})
    return text.removeprefix(notice)


def _was_answered(request: PMRequest) -> bool:
    return request.status == PMRequest.Status.ANSWERED and bool(request.answer)


def _answer(request: PMRequest, original: PMRequest) -> None:
    if request.kind != original.kind:
        raise _Diverged(
            f"the replay's PM request {request.question[:80]!r} is a {request.kind} request; "
            f"the original's was a {original.kind} request ({original.question[:80]!r})."
        )
    extra = {}
    if request.kind == PMRequest.Kind.APPROVAL:
        extra = {"note": original.note}
        if (
            original.approved_arguments is not None
            and original.approved_arguments != original.arguments
        ):
            extra["arguments"] = original.approved_arguments
    pm_requests.pm_request_answer(request_id=request.id, answer=original.answer, **extra)


def _pm_posts(source: Team, requests: list[PMRequest]) -> list[Message]:
    """The PM's own posts of the original (its answers are given to requests)."""
    posts = list(
        Message.objects.filter(team=source, kind=Message.Kind.PM, recipient__isnull=True).order_by(
            "id"
        )
    )
    answers = []
    for request in requests:
        if request.kind != PMRequest.Kind.QUESTION or not _was_answered(request):
            continue
        match = next(
            (
                m
                for m in posts
                if m.content == request.answer.strip()
                and m.created_at >= request.answered_at
                and m.pk not in answers
            ),
            None,
        )
        if match is not None:
            answers.append(match.pk)
    return [m for m in posts if m.pk not in answers]


def _diff(theirs: dict, mine: dict) -> str:
    a = request_text(
        {"model": theirs.get("model"), "max_tokens": theirs.get("max_tokens"), **theirs}
    )
    b = request_text({"model": theirs.get("model"), "max_tokens": theirs.get("max_tokens"), **mine})
    lines = list(
        difflib.unified_diff(a.splitlines(), b.splitlines(), "original", "replay", lineterm="", n=3)
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more lines)"]
    return "\n".join(lines)


def team_replay(
    *, team: Team, slug: str | None = None, until_turn: int | None = None, user=None
) -> Replay:
    """Replay `team`'s recorded run as a new team (see the module's docstring)."""
    if until_turn is not None and until_turn < 1:
        raise InvalidInput("until_turn is a turn number, from 1.", field="until_turn")
    if not Turn.objects.filter(team=team).exists():
        raise InvalidInput(f"Team {team.slug!r} has no recorded turn to replay.")
    # A replay runs the whole recorded run in the request: bounded by the source's size.
    fork_limits.fork_allowed(
        team=team, messages=fork_limits.messages_of(team), user=user, doing="replay the team"
    )
    slug = (slug or "").strip()
    if not slug:
        slug = f"{team.slug[:50]}-replay"
        if Team.objects.filter(slug=slug).exists():
            slug = cloning.next_free_slug(slug)
    with transaction.atomic():
        copy = forking.team_fork(
            team=team,
            slug=slug,
            name=f"{team.name[:110]} (replay)",
            point=forking.start_point(team),
            user=user,
            limited=False,
        )
        row = Replay.objects.create(
            source=team, source_slug=team.slug, team=copy, until_turn=until_turn
        )
    try:
        return Replayer(row, team, copy).run(until_turn=until_turn)
    except Exception as exc:  # never leave a replay "running": workers would skip its team
        Replay.objects.filter(pk=row.pk, status=Replay.Status.RUNNING).update(
            status=Replay.Status.DIVERGED,
            reason=f"The replay stopped on an error: {type(exc).__name__}: {exc}",
            finished_at=timezone.now(),
        )
        raise


def report_text(row: Replay) -> str:
    """The replay's report, as the command prints it."""
    lines = [
        f"Replay of {row.source_slug!r} as {row.team.slug!r}: {row.get_status_display()}, "
        f"{row.turns_replayed} turns, {row.model_steps} model calls answered from the record, "
        "0 tokens.",
    ]
    if row.status == Replay.Status.DIVERGED:
        lines.append(f"Diverged at turn {row.diverged_turn} ({row.diverged_agent}): {row.reason}")
        if row.diff:
            lines += ["", row.diff]
    return "\n".join(lines)


__all__ = ["Replayer", "report_text", "team_replay"]
