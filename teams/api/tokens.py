"""API tokens of a team: list, create (the key shown once), revoke."""

from ninja import Router, Status

from teams import selectors, services
from teams.api.auth import caller
from teams.api.paging import MAX_ID
from teams.api.schemas.common import responses
from teams.api.schemas.tokens import TokenCreatedOut, TokenIn, TokenOut
from teams.errors import NotFound

router = Router(tags=["tokens"])


@router.get(
    "/teams/{team}/tokens",
    response=responses({200: list[TokenOut]}, 404),
    operation_id="tokens_list",
)
def tokens_list(request, team: str):
    """The team's tokens (never their keys), newest first, with when each was last
    used, when it expires and whether it is read-only."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("list the team's tokens")
    who.require_person("list the team's tokens")
    return [TokenOut.of(t) for t in row.api_tokens.select_related("agent").order_by("-id")]


@router.post(
    "/teams/{team}/tokens",
    response=responses({201: TokenCreatedOut}, 400, 404),
    operation_id="tokens_create",
)
def tokens_create(request, team: str, payload: TokenIn):
    """A new team token, optionally bound to one agent, expiring (`expires_in`) or
    read-only; its key is in this response only (only a hash is stored)."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("create tokens")
    who.require_person("create tokens")
    agent = selectors.agent_get(team=row, name=payload.agent) if payload.agent else None
    token, key = services.api_token_create(
        team=row,
        agent=agent,
        label=payload.label,
        expires_in=payload.expires_in,
        read_only=payload.read_only,
    )
    return Status(201, TokenCreatedOut(**TokenOut.of(token).model_dump(), key=key))


@router.delete(
    "/teams/{team}/tokens/{token_id}",
    response=responses({204: None}, 404),
    operation_id="tokens_revoke",
)
def tokens_revoke(request, team: str, token_id: int):
    """Revoke a token at once; it is refused from its next request on."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("revoke tokens")
    who.require_person("revoke tokens")
    token = row.api_tokens.filter(pk=token_id).first() if 0 < token_id <= MAX_ID else None
    if token is None:
        raise NotFound(f"Team {row.slug!r} has no token {token_id}.")
    services.api_token_revoke(token=token)
    return Status(204, None)
