"""Who is calling and what they may reach: one rule for the REST API and the live
sockets.

A caller is a staff user (a browser session, or an account token acting with its
user's rights) or a team token (one team; bound to an agent, it acts only as that
agent). A team the caller may not see is NotFound, exactly as if it did not exist."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Q, QuerySet
from django.utils import timezone

from teams.errors import NotFound, PermissionDenied, Unauthenticated
from teams.models import Agent, ApiToken, Team, team_slug_validator
from teams.selectors import teams_visible_to

# A token's last use is written at most this often: not one write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
SLUG_MAX = Team._meta.get_field("slug").max_length
# What a read-only token may still do: read.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
UNKNOWN_TOKEN = (
    "Authentication required: send Authorization: Bearer <token> with a live token "
    "(this one is unknown or revoked)."
)


@dataclass(frozen=True)
class Caller:
    user: object | None = None  # the staff user whose rights apply, if any
    token: ApiToken | None = None

    def __str__(self) -> str:
        """A stable identity, the key of the caller's rate limit."""
        return f"token:{self.token.pk}" if self.token is not None else f"user:{self.user.pk}"

    @property
    def label(self) -> str:
        """How the caller is named where changes are recorded (anchor history)."""
        if self.user is not None:
            return f"pm ({self.user.get_username()})"[:60]
        return f"token {self.token.name or self.token.prefix}"[:60]

    @property
    def read_only(self) -> bool:
        """A read-only token: every read, no write and no tool call."""
        return self.token is not None and self.token.read_only

    def expired(self, now=None) -> bool:
        """Has the token's expiry passed (as this caller was loaded)?"""
        expires_at = self.token.expires_at if self.token is not None else None
        return expires_at is not None and expires_at <= (now or timezone.now())

    def require_method(self, method: str, doing: str) -> None:
        """Refuse a read-only token anything but reading: the one check every write
        and tool call passes (the API's auth runs it for each request)."""
        if self.read_only and method.upper() not in SAFE_METHODS:
            raise PermissionDenied(
                f"This token is read-only: it may read (GET) but not {doing}. "
                "Writes and tool calls need a token made without --read-only."
            )

    @property
    def agent_id(self) -> int | None:
        """The one agent a bound token may act as."""
        return self.token.agent_id if self.token is not None else None

    def teams(self) -> QuerySet[Team]:
        if self.user is None:
            return Team.objects.filter(pk=self.token.team_id)
        return teams_visible_to(user=self.user)

    def team(self, slug: str) -> Team:
        team = self.teams().filter(slug=slug).first() if _is_slug(slug) else None
        if team is None:
            raise NotFound(f"No team with slug {slug!r}.")
        return team

    def require_pm(self, doing: str) -> None:
        """Refuse a PM's action (start a team, answer a request) to an agent's token."""
        if self.agent_id is not None:
            raise PermissionDenied(
                f"This token acts only as agent {self.token.agent.name!r}; it cannot {doing}."
            )

    def require_agent(self, agent: Agent) -> None:
        """Refuse to act as `agent` when the token is bound to another one."""
        if self.agent_id is not None and self.agent_id != agent.id:
            raise PermissionDenied(
                f"This token acts only as agent {self.token.agent.name!r}, not as {agent.name!r}."
            )

    def require_person(self, doing: str) -> None:
        """Refuse to a team token what only a person (a session or an account token)
        may do: tokens must not be able to make more tokens."""
        if self.user is None:
            raise PermissionDenied(
                f"A team token cannot {doing}: use an account token "
                "(create_api_token --user NAME) or a staff session."
            )

    def require_superuser(self, doing: str) -> None:
        if self.user is None or not self.user.is_superuser:
            raise PermissionDenied(f"Only a superuser may {doing}.")

    def require_team_creator(self) -> None:
        if self.user is None:
            raise PermissionDenied(
                "A team token reaches its own team only; create teams with an account "
                "token (create_api_token --user NAME) or a staff session."
            )
        if not self.user.has_perm("teams.add_team"):
            raise PermissionDenied(
                f"User {self.user.get_username()!r} may not create teams (no teams.add_team)."
            )


def _is_slug(slug: str) -> bool:
    """Could this be a team's slug? Anything else is not looked up at all."""
    return len(slug) <= SLUG_MAX and team_slug_validator.regex.fullmatch(slug) is not None


def caller_for_user(user) -> Caller | None:
    """A logged-in staff user, or None."""
    if user is None or not user.is_authenticated or not user.is_active or not user.is_staff:
        return None
    return Caller(user=user)


def expired_message(token: ApiToken) -> str:
    when = token.expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"This token expired at {when}; make a new one."


def caller_for_token(raw_key: str) -> Caller:
    """The caller an API key stands for, or Unauthenticated saying why not: an unknown
    or revoked key, an expired one, or an account token whose user is no longer
    active staff. Marks the token used."""
    if not raw_key or len(raw_key) > 200:
        raise Unauthenticated(UNKNOWN_TOKEN)
    # The token row alone (key_hash is unique: no ordering, no joins): every API request
    # runs this, and compiling a join with the agent's columns and an ORDER BY cost
    # more than the rest of a small request. The user is read below; the agent only
    # when a refusal names it.
    try:
        token = ApiToken.objects.get(key_hash=ApiToken.hash_key(raw_key), revoked_at__isnull=True)
    except ApiToken.DoesNotExist:
        raise Unauthenticated(UNKNOWN_TOKEN) from None
    now = timezone.now()
    if token.expires_at is not None and token.expires_at <= now:
        raise Unauthenticated(expired_message(token))
    user = None
    if token.user_id is not None:
        try:
            user = token.user
        except ObjectDoesNotExist:  # deleted since its token was read
            user = None
        if caller_for_user(user) is None:
            raise Unauthenticated(
                "Authentication required: this account token's user is no longer active "
                "staff, so the token acts with no rights."
            )
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return Caller(user=user, token=token)


def caller_for_key(raw_key: str) -> Caller | None:
    """The caller an API key stands for; None when it is refused (caller_for_token)."""
    try:
        return caller_for_token(raw_key)
    except Unauthenticated:
        return None


def caller_refreshed(caller: Caller) -> Caller | None:
    """The same caller as the database has it now: None once its token is revoked or
    expired or its user is no longer active staff (a live socket re-checks with this)."""
    if caller.token is None:
        user = get_user_model().objects.filter(pk=caller.user.pk).first()
        return caller_for_user(user)
    token = (
        ApiToken.objects.select_related("agent")
        .filter(pk=caller.token.pk, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .first()
    )
    if token is None:
        return None
    user = None
    if token.user_id is not None:
        user = caller_for_user(get_user_model().objects.filter(pk=token.user_id).first())
        if user is None:
            return None
        user = user.user
    return Caller(user=user, token=token)


def bearer_key(headers) -> str | None:
    """The key of an `Authorization: Bearer <key>` header among ASGI (name, value)
    pairs, or None."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, key = value.decode("latin1").partition(" ")
            if scheme.lower() == "bearer" and key.strip():
                return key.strip()
    return None


def caller_for_scope(scope) -> Caller | None:
    """A WebSocket's caller: its Bearer token when the handshake has one (a program),
    else the session's staff user (a page)."""
    key = bearer_key(scope.get("headers", []))
    if key is not None:
        return caller_for_key(key)
    return caller_for_user(scope.get("user"))
