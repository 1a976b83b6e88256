"""Run a team again: a fresh idle copy of a team, to go on where a finished one ended.

What it holds and leaves out follows the one list of a team's state,
teams.history.team_state. The copy has the source's goal, phases, plan and settings
(budgets, tool access and approvals, phase guide, stuck checks), managers, consultants
and MCP servers (with the tools they listed, so the first turn offers them; a PM's
copy gets a server without the host's variables it was given); its agents (the same
names, roles, models, prompts, positions and budgets, with fresh counters, and each
starting the first phase with the trajectory Loom declares for it, or its own when it
was for that phase); its current anchors (each with a revision saying where it came
from); and a copy of its workspace folder. Nothing of the source's life comes along:
no conversation, turns, queries, keepers, PM requests or consultations; nor tokens or
webhooks (team_state says why). The copy is named "<name> (run N)", N from its slug
("demo-2": run 2), unless named.

The copy's workspace is always its own default folder (named by its own UUID,
teams.files.workspace), never the source's custom folder. Regular files
and folders are copied (links and anything else are not), at most MAX_COPY_FILES
files and MAX_COPY_BYTES bytes; the rows saying which agent wrote a file come along,
pointing at the copy's agent of the same name, with no turn.

The files are copied first into a hidden staging folder (outside any transaction:
a large copy never holds the database), then the rows are written in one
transaction that moves the staging folder into place as its last step; a refusal or
a failure leaves nothing behind, rows or files."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
from pathlib import Path

from django.db import transaction

from teams import services
from teams.conversation import hierarchy
from teams.errors import Conflict, InvalidInput, validated
from teams.files import workspace
from teams.history import team_state
from teams.integrations import mcp_servers
from teams.models import Agent, Anchor, Team, WorkspaceFile

MAX_COPY_FILES = 10_000
MAX_COPY_BYTES = 200 * 1024 * 1024
SLUG_MAX = Team._meta.get_field("slug").max_length
# "demo-2" runs again as "demo-3", not "demo-2-2"; "release-2024" as "release-2024-2".
NUMBERED = re.compile(r"^(?P<base>.+)-(?P<n>[1-9][0-9]{0,2})$")
NAME_MAX = Team._meta.get_field("name").max_length
# What a copy's name says of it, taken off before a copy of a copy says its own.
COPY_SUFFIX = re.compile(r" \((run \d+|run again|fork of [^()]*)\)$")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _workspaces() -> Path:
    return workspace.workspaces_folder()


def next_free_slug(slug: str) -> str:
    """The first of "<slug>-2", "<slug>-3"... that no team has; a numbered slug counts
    on ("demo-2" gives "demo-3")."""
    base, start = slug, 2
    numbered = NUMBERED.match(slug)
    if numbered:
        base, start = numbered["base"], int(numbered["n"]) + 1
    taken = set(Team.objects.filter(slug__startswith=base[:40]).values_list("slug", flat=True))
    n = start
    while True:
        suffix = f"-{n}"
        candidate = base[: SLUG_MAX - len(suffix)].rstrip("-") + suffix
        if candidate not in taken:
            return candidate
        n += 1


class _TooBig(Exception):
    pass


def _files_of(root: Path, skip: Path | None = None) -> tuple[list[str], int]:
    """The regular files under root (relative, "/"-separated) and their total size;
    links are neither followed nor copied, `skip` (where the copy goes) is left out.
    _TooBig once over MAX_COPY_FILES files or MAX_COPY_BYTES bytes."""
    found, total = [], 0
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(folder)
        kept = []
        for name in sorted(dirnames):
            path = here / name
            try:
                if path != skip and stat.S_ISDIR(os.lstat(path).st_mode):
                    kept.append(name)
            except OSError:
                continue  # gone meanwhile
        dirnames[:] = kept
        for name in sorted(filenames):
            if name.startswith(".loom-") and name.endswith(".tmp"):
                continue  # a write under way
            try:
                st = os.lstat(here / name)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((here / name).relative_to(root).as_posix())
                total += st.st_size
                if len(found) > MAX_COPY_FILES or total > MAX_COPY_BYTES:
                    raise _TooBig
    return found, total


def _copy_file(source: Path, target: Path) -> int:
    """Copy one regular file (never through a link), keeping its permission bits."""
    fd = os.open(source, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return -1
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        out = os.open(target, _WRITE_FLAGS, stat.S_IMODE(st.st_mode) & 0o777 or 0o600)
        size = 0
        try:
            while chunk := os.read(fd, 1024 * 1024):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
                size += len(chunk)
        finally:
            os.close(out)
        return size
    finally:
        os.close(fd)


def _stage_workspace(source: Team) -> tuple[Path, dict[str, int]]:
    """The source's files copied into a hidden staging folder, and each one's size.
    A custom folder that holds the teams' default folders never lends them."""
    root = workspace.workspace_root(source)
    try:
        files, _ = _files_of(root, skip=_workspaces())
    except _TooBig:
        raise Conflict(
            f"Team {source.slug!r}'s workspace is too big to copy: running a "
            f"team again copies at most {MAX_COPY_FILES:,} files and "
            f"{MAX_COPY_BYTES // (1024 * 1024)} MB. Move what it does not need out of it "
            "first."
        ) from None
    _workspaces().mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = _workspaces() / f".run-again-{secrets.token_hex(8)}"
    staging.mkdir(mode=0o700)
    copied = {}
    try:
        for rel in files:
            try:
                size = _copy_file(root / rel, staging / rel)
            except FileNotFoundError:
                continue  # removed meanwhile
            except OSError as exc:
                raise InvalidInput(
                    f"Team {source.slug!r}'s file {rel!r} could not be copied: {exc.strerror}."
                ) from None
            if size >= 0:
                copied[rel] = size
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, copied


def copy_name(name: str, what: str) -> str:
    """A copy's name: "Demo team (run 2)", "Demo team (fork of message 19)"; a copy of
    a copy says only what it is itself."""
    base = COPY_SUFFIX.sub("", name.strip()) or name.strip()
    suffix = f" ({what})"
    return base[: NAME_MAX - len(suffix)].rstrip() + suffix


def _slug_check(slug: str, name: str, source: Team) -> None:
    """Refuse a slug the copy cannot have, before any file is copied."""
    validated(Team(slug=slug, name=name, goal=source.goal, plan=source.plan, phases=source.phases))
    if Team.objects.filter(slug=slug).exists():
        raise services.slug_unavailable(slug)


def team_clone(*, team: Team, slug: str, name: str | None = None, user=None) -> Team:
    """A fresh idle copy of `team` (see the module's docstring) with slug `slug`, named
    `name` (the source's name when not given). `user`, the person running it again,
    manages the copy too unless a superuser (who sees every team anyway).

    A slug that is invalid (InvalidInput) or taken (Conflict), both on the field
    "slug", stores nothing."""
    slug = (slug or "").strip()
    if name is None or not name.strip():
        numbered = NUMBERED.match(slug)
        name = copy_name(team.name, f"run {numbered['n']}" if numbered else "run again")
    name = name.strip()
    services.text_check(name, field="name")
    _slug_check(slug, name, team)
    staging, copied = _stage_workspace(team)
    try:
        with transaction.atomic():
            clone = _clone_rows(team, slug=slug, name=name, user=user, copied=copied)
            # The copy's own default folder, named by its own UUID: nobody's leftover.
            target = workspace.default_root(clone)
            try:
                os.rename(staging, target)
            except OSError as exc:
                raise Conflict(
                    f"The copy's workspace folder could not be made ({exc.strerror}); "
                    "nothing was stored: try again.",
                ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone when it was moved into place
    return clone


def _clone_rows(source: Team, *, slug: str, name: str, user, copied: dict[str, int]) -> Team:
    clone = services.team_create(
        slug=slug,
        name=name,
        goal=source.goal,
        plan=source.plan,
        phases=list(source.phases),
        max_turns=source.max_turns,
        max_cost_usd=source.max_cost_usd,
    )
    for field in team_state.TEAM_SETTINGS:
        setattr(clone, field, getattr(source, field))
    clone.save()
    clone.managers.set(source.managers.all())
    clone.consultants.set(source.consultants.all())
    if user is not None and not user.is_superuser:
        clone.managers.add(user)
    by_superuser = user is None or user.is_superuser  # None: an operator's command
    mcp_servers.mcp_servers_copy(source=source, target=clone, by_superuser=by_superuser)
    agents = {}
    first = clone.phase
    for agent in source.agents.order_by("position", "id"):
        values = {field: getattr(agent, field) for field in team_state.AGENT_SETTINGS}
        if agent.trajectory_phase == first and agent.trajectory:
            values.update({level: getattr(agent, level) for level in team_state.AGENT_HIERARCHY})
        else:  # another phase's intent: the copy begins its first phase as Loom does
            values.update(
                trajectory=hierarchy.phase_trajectory(team=clone, role=agent.role, phase=first),
                trajectory_phase=first,
            )
        agents[agent.id] = Agent.objects.create(team=clone, **values)
    changed_by = f"run again from {source.slug}"[:60]
    for anchor in Anchor.objects.filter(team=source).order_by("key"):
        # Who pinned it, and when, read the same in the clone (an agent's anchor names
        # the agent); its revision says where it came from.
        copy = services.anchor_save(
            team=clone,
            key=anchor.key,
            value=anchor.value,
            changed_by=changed_by,
            source=anchor.source,
            phase=anchor.phase,
        )
        if anchor.source == Anchor.Source.AGENT:
            Anchor.objects.filter(pk=copy.pk).update(updated_by=anchor.updated_by)
    rows = WorkspaceFile.objects.filter(team=source, path__in=list(copied))
    WorkspaceFile.objects.bulk_create(
        WorkspaceFile(
            team=clone,
            path=row.path,
            size=copied[row.path],
            agent=agents.get(row.agent_id),
            writes=row.writes,
        )
        for row in rows
    )
    return clone


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def made_message(*, team: Team, source: Team | str) -> str:
    """What the faces say of a copy: "Made team 'demo-2' from 'demo': 4 agents,
    2 anchors, 1 workspace file." """
    source_slug = source if isinstance(source, str) else source.slug
    try:
        files = len(_files_of(workspace.workspace_root(team))[0])
    except _TooBig:
        files = MAX_COPY_FILES
    said = (
        f"Made team {team.slug!r} from {source_slug!r}: "
        f"{_count(team.agents.count(), 'agent')}, {_count(team.anchors.count(), 'anchor')}, "
        f"{_count(files, 'workspace file')}."
    )
    if not isinstance(source, str):
        stripped = mcp_servers.mcp_servers_stripped(source=source, copy=team)
        if stripped:
            said += " " + mcp_servers.WITHOUT_VARIABLES.format(names=", ".join(stripped))
    return said
