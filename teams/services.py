"""Writes. Every function takes keyword-only arguments, runs in a transaction and
raises a teams.errors.LoomError for expected failures."""

import re
import secrets
from contextlib import contextmanager

from django.db import IntegrityError, transaction
from django.utils.text import slugify

from teams.errors import Conflict, InvalidInput
from teams.models import (
    AGENT_NAME_PATTERN,
    ANCHOR_KEY_PATTERN,
    DEFAULT_PHASES,
    Agent,
    Anchor,
    AnchorRevision,
    ApiToken,
    Message,
    PMRequest,
    Query,
    Team,
)


@contextmanager
def _integrity_as(error: Exception):
    """Turn a database constraint violation into the service's own error.

    The savepoint keeps an outer transaction usable after the failed statement."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        raise error from exc


def _validate_agent_name(name: str) -> str:
    name = (name or "").strip()
    if not re.match(AGENT_NAME_PATTERN, name):
        raise InvalidInput(
            f"Agent name {name!r} is not usable as an @mention: start with a letter, "
            "then letters, digits, '-' or '_' (at most 40).",
            field="name",
        )
    return name


def _validate_role(role: str) -> str:
    if role not in Agent.Role.values:
        raise InvalidInput(
            f"Unknown role {role!r}; choose one of {', '.join(Agent.Role.values)}.", field="role"
        )
    return role


@transaction.atomic
def team_create(
    *,
    slug: str,
    name: str = "",
    goal: str = "",
    phases: list[str] | None = None,
    agents: list[dict] | None = None,
    workspace: str = "",
    max_turns: int = 200,
) -> Team:
    """Create a team and, optionally, its agents ({"name", "role", ...} dicts)."""
    slug = (slug or "").strip()
    if not slug or slugify(slug) != slug:
        raise InvalidInput(
            f"Team slug {slug!r} must be lowercase letters, digits and dashes.", field="slug"
        )
    phases = list(phases) if phases is not None else list(DEFAULT_PHASES)
    if not phases or not all(isinstance(p, str) and p.strip() for p in phases):
        raise InvalidInput(
            "A team needs at least one phase, each a non-empty name.", field="phases"
        )
    if max_turns < 1:
        raise InvalidInput("The turn budget must be at least 1.", field="max_turns")
    for field, value in (("name", name), ("goal", goal), ("phases", "".join(phases))):
        text_check(value, field=field)
    if Team.objects.filter(slug=slug).exists():
        raise Conflict(f"A team with slug {slug!r} already exists.", field="slug")
    team = Team(
        slug=slug,
        name=name or slug,
        goal=goal,
        phases=phases,
        workspace=workspace,
        max_turns=max_turns,
    )
    with _integrity_as(Conflict(f"A team with slug {slug!r} already exists.", field="slug")):
        team.save()
    for position, spec in enumerate(agents or []):
        agent_create(team=team, position=position, **spec)
    return team


@transaction.atomic
def agent_create(
    *,
    team: Team,
    name: str,
    role: str,
    model: str = "",
    role_prompt: str = "",
    position: int | None = None,
) -> Agent:
    name = _validate_agent_name(name)
    role = _validate_role(role)
    if team.agents.filter(name=name).exists():
        raise Conflict(f"Team {team.slug!r} already has an agent named {name!r}.", field="name")
    if position is None:
        position = team.agents.count()
    agent = Agent(
        team=team, name=name, role=role, model=model, role_prompt=role_prompt, position=position
    )
    with _integrity_as(Conflict(f"Team {team.slug!r} already has an agent named {name!r}.")):
        agent.save()
    return agent


def text_check(value: str, *, field: str) -> None:
    """Refuse text no database can store as given (PostgreSQL rejects NUL)."""
    if "\x00" in value:
        raise InvalidInput(f"The {field} may not contain NUL characters.", field=field)


def message_add(
    *,
    team: Team,
    content: str,
    kind: str = Message.Kind.CHAT,
    author: Agent | None = None,
    author_label: str = "",
    recipient: Agent | None = None,
    turn=None,
    query: Query | None = None,
    phase: str | None = None,
) -> Message:
    """Append to the team conversation (no recipient) or to an agent's inbox."""
    if kind not in Message.Kind.values:
        raise InvalidInput(f"Unknown message kind {kind!r}.", field="kind")
    if not content or not content.strip():
        raise InvalidInput("A message needs some content.", field="content")
    text_check(content, field="content")
    for agent in (author, recipient):
        if agent is not None and agent.team_id != team.id:
            raise InvalidInput(f"Agent {agent.name!r} is not in team {team.slug!r}.")
    message = Message.objects.create(
        team=team,
        content=content,
        kind=kind,
        author=author,
        author_label=author_label,
        recipient=recipient,
        turn=turn,
        query=query,
        phase=team.phase if phase is None else phase,
    )
    return message


@transaction.atomic
def anchor_save(*, team: Team, key: str, value: str, changed_by: str = "") -> Anchor:
    """Create an anchor or replace its value, keeping the old value in its history."""
    key = (key or "").strip()
    if not re.match(ANCHOR_KEY_PATTERN, key):
        raise InvalidInput(
            f"Anchor key {key!r} must start with a letter or digit and use letters, digits, "
            "'_', '.', ':' or '-' (at most 80).",
            field="key",
        )
    if not value or not value.strip():
        raise InvalidInput("An anchor needs a value.", field="value")
    text_check(value, field="value")
    anchor = Anchor.objects.select_for_update().filter(team=team, key=key).first()
    if anchor is None:
        anchor = Anchor(team=team, key=key, value=value, updated_by=changed_by)
        with _integrity_as(Conflict(f"Anchor {key!r} was saved concurrently; try again.")):
            anchor.save()
    elif anchor.value != value:
        anchor.value = value
        anchor.updated_by = changed_by
        anchor.save(update_fields=["value", "updated_by", "updated_at"])
    AnchorRevision.objects.create(anchor=anchor, value=value, changed_by=changed_by)
    return anchor


@transaction.atomic
def pm_request_open(*, team: Team, question: str, agent: Agent | None = None, turn=None):
    if not question or not question.strip():
        raise InvalidInput("A PM request needs a question.", field="question")
    text_check(question, field="question")
    if PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).exists():
        raise Conflict(f"Team {team.slug!r} already has an open PM request.")
    with _integrity_as(Conflict(f"Team {team.slug!r} already has an open PM request.")):
        return PMRequest.objects.create(team=team, question=question, agent=agent, turn=turn)


@transaction.atomic
def api_token_create(*, team: Team, name: str) -> tuple[ApiToken, str]:
    """Create a token; the plain key is returned once and never stored."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput("A token needs a name.", field="name")
    if team.api_tokens.filter(name=name).exists():
        raise Conflict(f"Team {team.slug!r} already has a token named {name!r}.", field="name")
    raw_key = "loom_" + secrets.token_urlsafe(32)
    token = ApiToken(
        team=team,
        name=name,
        prefix=raw_key[: ApiToken.PREFIX_LENGTH],
        key_hash=ApiToken.hash_key(raw_key),
    )
    with _integrity_as(Conflict(f"Team {team.slug!r} already has a token named {name!r}.")):
        token.save()
    return token, raw_key
