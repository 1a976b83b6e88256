"""Basic writes. The services take keyword-only arguments, run in a transaction and
raise a teams.errors.LoomError for expected failures (message_add joins its caller's
transaction; team_lock and team_status_publish are helpers for other services). The rules a row must
follow are written once, on its model (validators, choices, constraints); services
run them through teams.errors.validated / integrity_as."""

from __future__ import annotations

import secrets

from django.db import transaction

from teams import events, lifecycle
from teams.errors import Conflict, InvalidInput, integrity_as, validated
from teams.models import (
    DEFAULT_PHASES,
    HUMAN_TEXT_LIMIT,
    Agent,
    Anchor,
    AnchorRevision,
    ApiToken,
    Message,
    Query,
    Team,
)
from teams.schemas import MessageOut

# Fields of a team a person configures; status, phase, counters and spend are live
# state that only the services below and the engine change.
TEAM_SETTINGS = ("slug", "name", "goal", "phases", "workspace", "max_turns", "max_cost_usd")


def text_check(value: str, *, field: str) -> None:
    """Refuse text no database can store as given (PostgreSQL rejects NUL)."""
    if "\x00" in value:
        raise InvalidInput(f"The {field} may not contain NUL characters.", field=field)


def human_text_check(value: str, *, field: str) -> None:
    """Refuse what a person may not submit: NUL characters, or more than
    HUMAN_TEXT_LIMIT characters (nothing is stored then)."""
    text_check(value, field=field)
    if len(value) > HUMAN_TEXT_LIMIT:
        raise InvalidInput(
            f"The {field} has {len(value):,} characters; at most {HUMAN_TEXT_LIMIT:,} are "
            "accepted.",
            field=field,
        )


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
    phases = list(phases) if phases is not None else list(DEFAULT_PHASES)
    for field, value in (("name", name), ("goal", goal), ("phases", "".join(map(str, phases)))):
        text_check(value, field=field)
    team = Team(
        slug=slug,
        name=name or slug,
        goal=goal,
        phases=phases,
        workspace=workspace,
        max_turns=max_turns,
    )
    duplicate = Conflict(f"A team with slug {slug!r} already exists.", field="slug")
    if Team.objects.filter(slug=slug).exists():
        raise duplicate
    validated(team)
    with integrity_as(duplicate):
        team.save()
    for position, spec in enumerate(agents or []):
        agent_create(team=team, position=position, **spec)
    return team


@transaction.atomic
def team_update(*, team: Team, fields: list[str]) -> Team:
    """Save the settings a person changed on `team`, and nothing else: a stale form
    never writes back status, phase, turn count or spend."""
    unknown = set(fields) - set(TEAM_SETTINGS)
    if unknown:
        raise InvalidInput(f"Not a team setting: {', '.join(sorted(unknown))}.")
    validated(team, exclude=[f for f in TEAM_SETTINGS if f not in fields])
    if not fields:
        return team
    with integrity_as(Conflict(f"A team with slug {team.slug!r} already exists.", field="slug")):
        team.save(update_fields=[*fields, "updated_at"])
    return team


@transaction.atomic
def team_transition(*, team: Team, action: lifecycle.TeamAction) -> bool:
    """Move a locked team along the state table and tell its viewers; False (and no
    change) when the table does not allow the action from the current status."""
    status = lifecycle.next_status(team.status, action)
    if status is None:
        return False
    if status != team.status:
        team.status = status
        team.save(update_fields=["status", "updated_at"])
    team_status_publish(team)
    return True


def team_status_publish(team: Team) -> None:
    events.publish(events.TeamStatusChanged.of(team), team_id=team.id)


def team_lock(team: Team) -> Team:
    """The team's row, locked until the transaction ends, as it is now."""
    return Team.objects.select_for_update().get(pk=team.pk)


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
    name = (name or "").strip()
    if position is None:
        position = team.agents.count()
    agent = Agent(
        team=team, name=name, role=role, model=model, role_prompt=role_prompt, position=position
    )
    validated(agent, exclude=["team"])
    duplicate = Conflict(f"Team {team.slug!r} already has an agent named {name!r}.", field="name")
    if team.agents.filter(name=name).exists():
        raise duplicate
    with integrity_as(duplicate):
        agent.save()
    return agent


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
    """Append to the team conversation (no recipient) or to an agent's inbox, and
    tell live viewers once it is committed."""
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
    events.publish(events.MessageCreated(message=MessageOut.of(message)), team_id=team.id)
    return message


def system_note(team: Team, content: str, **kwargs) -> Message:
    return message_add(
        team=team, content=content, kind=Message.Kind.SYSTEM, author_label="system", **kwargs
    )


@transaction.atomic
def anchor_save(*, team: Team, key: str, value: str, changed_by: str = "") -> Anchor:
    """Create an anchor or replace its value, keeping the old value in its history."""
    key = (key or "").strip()
    if not value or not value.strip():
        raise InvalidInput("An anchor needs a value.", field="value")
    text_check(value, field="value")
    validated(Anchor(team=team, key=key, value=value), exclude=["team"])
    anchor = Anchor.objects.select_for_update().filter(team=team, key=key).first()
    if anchor is None:
        anchor = Anchor(team=team, key=key, value=value, updated_by=changed_by)
        with integrity_as(Conflict(f"Anchor {key!r} was saved concurrently; try again.")):
            anchor.save()
    elif anchor.value != value:
        anchor.value = value
        anchor.updated_by = changed_by
        anchor.save(update_fields=["value", "updated_by", "updated_at"])
    AnchorRevision.objects.create(anchor=anchor, value=value, changed_by=changed_by)
    return anchor


@transaction.atomic
def api_token_create(*, team: Team, name: str) -> tuple[ApiToken, str]:
    """Create a token; the plain key is returned once and never stored."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput("A token needs a name.", field="name")
    duplicate = Conflict(f"Team {team.slug!r} already has a token named {name!r}.", field="name")
    if team.api_tokens.filter(name=name).exists():
        raise duplicate
    raw_key = "loom_" + secrets.token_urlsafe(32)
    token = ApiToken(
        team=team,
        name=name,
        prefix=raw_key[: ApiToken.PREFIX_LENGTH],
        key_hash=ApiToken.hash_key(raw_key),
    )
    with integrity_as(duplicate):
        token.save()
    return token, raw_key
