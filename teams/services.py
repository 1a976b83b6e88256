"""Basic writes. The services take keyword-only arguments, run in a transaction and
raise a teams.errors.LoomError for expected failures (message_add joins its caller's
transaction; team_status_publish is a helper for other services; teams.run.locks
takes the rows' locks). The rules a row must follow are written once, on its model
(validators, choices, constraints); services run them through teams.errors.validated
/ integrity_as."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from teams.errors import Conflict, InvalidInput, NotFound, PermissionDenied, integrity_as, validated
from teams.lib import endpoints
from teams.live import events
from teams.live.event_payloads import AnchorOut
from teams.models import (
    ACTIVE_TURN_STATUSES,
    DEFAULT_PHASES,
    HUMAN_TEXT_LIMIT,
    Agent,
    Anchor,
    AnchorRevision,
    ApiToken,
    ConsultantProfile,
    Message,
    Query,
    Team,
)
from teams.run import drift, lifecycle, locks

# Fields of a team a person configures; status, phase, counters and spend are live
# state that only the services below and the engine change.
TEAM_SETTINGS = (
    "slug",
    "name",
    "goal",
    "plan",
    "phases",
    "workspace",
    "max_turns",
    "max_cost_usd",
    "phase_guide",
    "tool_access",
    "tool_approvals",
    "max_anchors",
    "anchor_value_limit",
    "max_exchanges",
    "max_pass_rounds",
    "max_phase_turns",
    "a2a",
)
AGENT_SETTINGS = (
    "name",
    "role",
    "model",
    "max_tokens",
    "role_prompt",
    "position",
    "context_budget_tokens",
    "max_cost_usd",
)


SLUG_UNAVAILABLE = "The slug {slug!r} is not available: choose another."


def slug_unavailable(slug: str) -> Conflict:
    """The one answer to a taken slug, on create, rename and run-again: the same words
    whether the team that has it is the caller's own or one it cannot see, so the
    answer tells nothing about teams the caller may not reach (teams.access) beyond
    what any taken name must: that this slug cannot be had."""
    return Conflict(SLUG_UNAVAILABLE.format(slug=slug), field="slug")


def text_check(value: str, *, field: str) -> None:
    """Refuse text no database can store as given (PostgreSQL rejects NUL)."""
    if "\x00" in value:
        raise InvalidInput(f"The {field} may not contain NUL characters.", field=field)


def without_nul(value):
    """Text or JSON minus NUL characters, which PostgreSQL text and jsonb refuse: a
    model's or an agent's stray one must not fail the row that carries it."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {k: without_nul(v) for k, v in value.items()}
    return value


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
    plan: str = "",
    phases: list[str] | None = None,
    agents: list[dict] | None = None,
    workspace: str = "",
    max_turns: int = 200,
    max_cost_usd=None,
    manager=None,
) -> Team:
    """Create a team and, optionally, its agents ({"name", "role", ...} dicts); a
    `manager` (the staff user creating it) manages it from the start."""
    slug = (slug or "").strip()
    phases = list(phases) if phases is not None else list(DEFAULT_PHASES)
    texts = (("name", name), ("goal", goal), ("plan", plan), ("phases", "".join(map(str, phases))))
    for field, value in texts:
        text_check(value, field=field)
    team = Team(
        slug=slug,
        name=name or slug,
        goal=goal,
        plan=plan,
        phases=phases,
        workspace=workspace,
        max_turns=max_turns,
    )
    if max_cost_usd is not None:
        team.max_cost_usd = max_cost_usd
    duplicate = slug_unavailable(slug)
    if Team.objects.filter(slug=slug).exists():
        raise duplicate
    validated(team)
    with integrity_as(duplicate):
        team.save()
    if manager is not None:
        team.managers.add(manager)
    for position, spec in enumerate(agents or []):
        agent_create(team=team, **{**spec, "position": spec.get("position", position)})
    return team


@transaction.atomic
def team_update(*, team: Team, fields: list[str], consultants: list[str] | None = None) -> Team:
    """Save the settings a person changed on `team`, and nothing else: a stale form
    never writes back status, phase, turn count or spend. `consultants` (profile
    names), when given, replaces the profiles its agents may ask."""
    unknown = set(fields) - set(TEAM_SETTINGS)
    if unknown:
        raise InvalidInput(f"Not a team setting: {', '.join(sorted(unknown))}.")
    if consultants is not None:
        team_consultants_set(team=team, names=consultants)
    for field in fields:
        if isinstance(getattr(team, field), str):
            text_check(getattr(team, field), field=field)
    validated(team, exclude=[f for f in TEAM_SETTINGS if f not in fields])
    if not fields:
        return team
    # A changed budget is a new budget: its 80% warning is armed again (as a budget
    # request's answer does, teams.run.budgets.budget_apply).
    caps = {"max_cost_usd": "cost_warned_at", "max_turns": "turns_warned_at"}
    stored = Team.objects.filter(pk=team.pk).values(*caps).first() or {}
    rearmed = [w for f, w in caps.items() if f in fields and stored.get(f) != getattr(team, f)]
    for field in rearmed:
        setattr(team, field, None)
    with integrity_as(slug_unavailable(team.slug)):
        team.save(update_fields=[*fields, *rearmed, "updated_at"])
    return team


def team_consultants_set(*, team: Team, names: list[str]) -> None:
    """The consultant profiles `team`'s agents may ask, by name; an unknown name
    changes nothing."""
    profiles = list(ConsultantProfile.objects.filter(name__in=names))
    missing = sorted(set(names) - {p.name for p in profiles})
    if missing:
        known = ", ".join(ConsultantProfile.objects.values_list("name", flat=True)) or "none"
        raise InvalidInput(
            f"No consultant profile named {missing[0]!r}. Profiles: {known}.", field="consultants"
        )
    team.consultants.set(profiles)


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
    events.publish(events.TeamProgress.of(team), team_id=team.id)


def team_done_check(team: Team) -> None:
    """Refuse to post to a done team (nobody will read it), saying how to go on."""
    status = Team.objects.filter(pk=team.pk).values_list("status", flat=True).first()
    if status == Team.Status.DONE:
        slug = team.slug
        raise Conflict(
            f"Team {slug!r} is done: nobody will read this. Run it again to go on: the Run "
            f"again button on its page, `manage.py team clone {slug} NEW_SLUG`, or "
            f"POST /api/teams/{slug}/clone."
        )


def model_route_check(model: str) -> None:
    """An agent's model id names an endpoint that exists (empty: the default model).
    Whether it can be called now (its key, its price) the faces say as well
    (teams.integrations.model_endpoints.model_id_problem)."""
    if model:
        problem = endpoints.route(model).problem
        if problem:
            raise InvalidInput(problem, field="model")


@transaction.atomic
def agent_create(
    *,
    team: Team,
    name: str,
    role: str,
    model: str = "",
    role_prompt: str = "",
    position: int | None = None,
    max_cost_usd=None,
    max_tokens: int | None = None,
) -> Agent:
    name = (name or "").strip()
    for field, value in (
        ("name", name),
        ("role", role),
        ("model", model),
        ("role_prompt", role_prompt),
    ):
        text_check(value or "", field=field)
    model_route_check(model)
    if position is None:
        position = team.agents.count()
    agent = Agent(
        team=team,
        name=name,
        role=role,
        model=model,
        role_prompt=role_prompt,
        position=position,
        max_cost_usd=max_cost_usd,
        max_tokens=max_tokens,
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
    events.publish(events.MessageCreated.of(message), team_id=team.id)
    return message


def system_note(team: Team, content: str, **kwargs) -> Message:
    return message_add(
        team=team, content=content, kind=Message.Kind.SYSTEM, author_label="system", **kwargs
    )


@transaction.atomic
def team_model_set(*, team: Team, model: str) -> list[str]:
    """Give every agent of the team driven by a model the same model id (empty: the
    default model); the names of the agents changed."""
    changed = []
    for agent in team.agents.exclude(role=Agent.Role.EXTERNAL).order_by("position", "id"):
        if agent.model != model:
            agent.model = model
            agent_update(agent=agent, fields=["model"])
            changed.append(agent.name)
    return changed


@transaction.atomic
def agent_update(*, agent: Agent, fields: list[str]) -> Agent:
    """Save the settings a person changed on `agent`; its turns and metrics are live
    state the engine keeps."""
    unknown = set(fields) - set(AGENT_SETTINGS)
    if unknown:
        raise InvalidInput(f"Not an agent setting: {', '.join(sorted(unknown))}.")
    for field in ("role_prompt", "model"):
        if field in fields:
            text_check(getattr(agent, field), field=field)
    if "model" in fields:
        model_route_check(agent.model)
    validated(agent, exclude=["team", *(f for f in AGENT_SETTINGS if f not in fields)])
    if not fields:
        return agent
    duplicate = Conflict(
        f"Team {agent.team.slug!r} already has an agent named {agent.name!r}.", field="name"
    )
    if "name" in fields and agent.team.agents.filter(name=agent.name).exclude(pk=agent.pk).exists():
        raise duplicate
    rearmed = agent_cost_rearmed(agent, fields)
    with integrity_as(duplicate):
        agent.save(update_fields=[*fields, *rearmed])
    return agent


def agent_cost_rearmed(agent: Agent, fields) -> list[str]:
    """A changed cost budget is a new budget: its 80% warning is armed again (as a
    budget request's answer does, teams.run.budgets.budget_apply), on `agent` before it
    is saved; the fields to save with it. Saving the same cap again re-arms nothing."""
    if "max_cost_usd" not in fields or agent.pk is None:
        return []
    stored = Agent.objects.filter(pk=agent.pk).values_list("max_cost_usd", flat=True).first()
    if stored == agent.max_cost_usd:
        return []
    agent.cost_warned_at = None
    return ["cost_warned_at"]


def agent_intent_publish(agent: Agent) -> None:
    """Tell the live view an agent's hierarchy changed (the mesh tools, a new phase, an
    edit in the admin): its drift card's levels and score."""
    score = drift.score(agent)
    intent = events.AgentIntentChanged.of(agent)
    intent.drift_score = score
    events.publish(intent, team_id=agent.team_id)


@transaction.atomic
def agent_delete(*, agent: Agent) -> None:
    """Remove an agent (its turns and inbox go with it); refused while it is in a turn."""
    agent = Agent.objects.select_for_update().get(pk=agent.pk)
    if agent.turn_set.filter(status__in=ACTIVE_TURN_STATUSES).exists():
        raise Conflict(
            f"Agent {agent.name!r} is in a turn now; pause the team and try again when the "
            "turn has ended."
        )
    agent.delete()


@transaction.atomic
def agent_message_post(*, agent: Agent, content: str) -> Message:
    """An external agent (a program) speaks in its team's conversation."""
    if agent.role != Agent.Role.EXTERNAL:
        raise PermissionDenied(
            f"Agent {agent.name!r} is a {agent.role} driven by its model; only external "
            "agents post messages through the API."
        )
    team_done_check(agent.team)
    if not content or not content.strip():
        raise InvalidInput("The message is empty.", field="content")
    human_text_check(content, field="content")
    return message_add(team=agent.team, content=content.strip(), author=agent)


def anchor_check(
    *,
    key: str,
    value: str,
    field: str | None = None,
    team: Team | None = None,
    source: str = Anchor.Source.PM,
) -> None:
    """Refuse an anchor that could not be saved (bad key, empty or oversized value);
    `field` names the form field the key came from, when it is not "key". With
    `team`, its limits apply too: an agent's value at most `team.anchor_value_limit`
    characters, a new key only under `team.max_anchors`."""
    if not value or not value.strip():
        raise InvalidInput("An anchor needs a value.", field="value")
    text_check(value, field="value")
    try:
        validated(Anchor(key=key, value=value), exclude=["team"])
    except InvalidInput as exc:
        if field and exc.field == "key":
            raise InvalidInput(exc.message, field=field) from None
        raise
    if team is not None:
        anchor_limits_check(team=team, key=key, value=value, source=source, field=field)


def anchor_limits_check(
    *, team: Team, key: str, value: str, source: str, field: str | None = None
) -> None:
    """The team's limits on anchors: an agent's value at most `anchor_value_limit`
    characters (the PM's keep the human limit), a new key only while the team has
    fewer than `max_anchors` (replacing a key is always allowed)."""
    limit = team.anchor_value_limit
    if source == Anchor.Source.AGENT and len(value) > limit:
        raise InvalidInput(
            f"An anchor an agent saves holds at most {limit:,} characters (the team's "
            f"limit); this value has {len(value):,}. Pin the decision itself in a few "
            "lines and keep the details in the conversation or a file.",
            field="value",
        )
    anchors = Anchor.objects.filter(team=team)
    if anchors.count() >= team.max_anchors and not anchors.filter(key=key).exists():
        raise InvalidInput(
            f"Team {team.slug!r} already has {team.max_anchors} anchors, its limit. Save "
            "under an existing key to replace its value, or have the PM delete an anchor "
            "or raise the team's limit (max anchors).",
            field=field or "key",
        )


# Anchors a person pinned (the PM, or the PM's answer): an agent's save_anchor may not
# change them, the PM's pages and the API may.
PERSON_ANCHOR_SOURCES = frozenset({Anchor.Source.PM, Anchor.Source.PM_ANSWER})


@transaction.atomic
def anchor_save(
    *,
    team: Team,
    key: str,
    value: str,
    changed_by: str = "",
    source: str = Anchor.Source.PM,
    phase: str = "",
) -> Anchor:
    """Create an anchor or replace its value, keeping the old value in its history.
    `source` and `phase` say who pinned it and when (the PM by default; an agent's
    save_anchor, a PM answer pinned as an anchor); the team's limits apply
    (anchor_check). The team row is locked for a new key, so two saves cannot both
    take the last place."""
    key = (key or "").strip()
    anchor_check(key=key, value=value, source=source)
    anchor = Anchor.objects.select_for_update().filter(team=team, key=key).first()
    if anchor is None:
        team = locks.team_lock(team)
        anchor_limits_check(team=team, key=key, value=value, source=source)
        anchor = Anchor(
            team=team, key=key, value=value, updated_by=changed_by, source=source, phase=phase
        )
        with integrity_as(Conflict(f"Anchor {key!r} was saved concurrently; try again.")):
            anchor.save()
    else:
        if source == Anchor.Source.AGENT and anchor.source in PERSON_ANCHOR_SOURCES:
            raise PermissionDenied(
                f"Anchor {key!r} was pinned by the PM ({anchor.get_source_display()}): only a "
                "person may change it. Ask the PM, or save your fact under another key."
            )
        anchor_limits_check(team=team, key=key, value=value, source=source)
        if anchor.value != value:  # the same value keeps who pinned it first
            anchor.value, anchor.updated_by = value, changed_by
            anchor.source, anchor.phase = source, phase
            anchor.save(update_fields=["value", "updated_by", "source", "phase", "updated_at"])
    AnchorRevision.objects.create(
        team=team, key=key, anchor=anchor, value=value, changed_by=changed_by
    )
    anchors_publish_saved(team=team, anchor=anchor)
    return anchor


def anchors_publish_saved(*, team: Team, anchor: Anchor) -> None:
    """Tell the live view an anchor was pinned or changed (once committed)."""
    events.publish(
        events.AnchorSaved(anchor=AnchorOut.of(anchor), anchors=team.anchors.count()),
        team_id=team.id,
    )


@transaction.atomic
def anchor_delete(*, team: Team, key: str, changed_by: str = "") -> None:
    """Unpin an anchor (the PM may delete any); its history stays, ending with the
    deletion."""
    anchor = Anchor.objects.select_for_update().filter(team=team, key=key).first()
    if anchor is None:
        raise NotFound(f"Team {team.slug!r} has no anchor {key!r}.")
    anchor.delete()
    AnchorRevision.objects.create(team=team, key=key, deleted=True, changed_by=changed_by)
    events.publish(events.AnchorDeleted(key=key, anchors=team.anchors.count()), team_id=team.id)


# A token's lifetime: a whole number of minutes, hours or days, at most ten years.
TOKEN_LIFETIME_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
TOKEN_LIFETIME_MAX = timedelta(days=3650)


def token_lifetime(text: str, *, field: str = "expires_in") -> timedelta:
    """'30m', '12h' or '90d' as a timedelta; InvalidInput for anything else."""
    match = re.fullmatch(r"([0-9]{1,7})([mhd])", (text or "").strip().lower())
    if match is None:
        raise InvalidInput(
            f"Say how long the token lives as a number and a unit: 30m, 12h or 90d "
            f"(minutes, hours, days), not {str(text)[:40]!r}.",
            field=field,
        )
    lifetime = timedelta(**{TOKEN_LIFETIME_UNITS[match[2]]: int(match[1])})
    if not timedelta(0) < lifetime <= TOKEN_LIFETIME_MAX:
        raise InvalidInput(
            f"A token lives from 1m to {TOKEN_LIFETIME_MAX.days}d, not {match[0]!r}.",
            field=field,
        )
    return lifetime


@transaction.atomic
def api_token_create(
    *,
    team: Team | None = None,
    agent: Agent | None = None,
    user=None,
    label: str = "",
    expires_in: str | None = None,
    read_only: bool = False,
) -> tuple[ApiToken, str]:
    """Create a team token (optionally bound to one of its agents) or an account token
    (a staff user's); with `expires_in` ('30m', '12h', '90d') it expires that long
    from now, with `read_only` it may only read. The plain key is returned once and
    never stored."""
    label = (label or "").strip()
    text_check(label, field="label")
    expires_at = timezone.now() + token_lifetime(expires_in) if expires_in else None
    if agent is not None:
        team = team or agent.team
        if agent.team_id != team.id:
            raise InvalidInput(f"Agent {agent.name!r} is not in team {team.slug!r}.", field="agent")
    if (team is None) == (user is None):
        raise InvalidInput("A token is for a team or for a user account, not both or neither.")
    if user is not None and not (user.is_active and user.is_staff):
        raise InvalidInput(
            f"User {user.get_username()!r} is not active staff: an account token acts with "
            "its user's rights, and this user has none in Loom.",
            field="user",
        )
    raw_key = "loom_" + secrets.token_urlsafe(32)
    token = ApiToken(
        team=team,
        agent=agent,
        user=user,
        name=label,
        prefix=raw_key[: ApiToken.PREFIX_LENGTH],
        key_hash=ApiToken.hash_key(raw_key),
        expires_at=expires_at,
        read_only=bool(read_only),
    )
    validated(token, exclude=["team", "agent", "user", "prefix", "key_hash"])
    token.save()
    return token, raw_key


@transaction.atomic
def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token at once; revoking it again changes nothing."""
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token.refresh_from_db(fields=["revoked_at"])
    return token
