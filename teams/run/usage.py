"""Token and cost accounting: every model call is added to its turn and its team."""

from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from teams.lib.catalog import Usage, cost_of
from teams.models import ModelCall, Team, Turn
from teams.run import locks


def turn_usage_fields(
    *, turn: Turn, model: str, usage: Usage, renew_lease=None, is_turn_model: bool = True
) -> tuple[dict, Decimal]:
    """The turn's UPDATE fields that add a call's tokens and cost, and the cost; the
    caller's copy of the turn is kept in step (the turn.finished event reports it).
    Apart from turn_add_usage, a turn's last call is counted in the finish's own
    UPDATE (teams.run.turns.turn_finish)."""
    cost = cost_of(model, usage)
    fields = dict(
        input_tokens=F("input_tokens") + usage.input_tokens,
        output_tokens=F("output_tokens") + usage.output_tokens,
        cache_creation_tokens=F("cache_creation_tokens") + usage.cache_creation_tokens,
        cache_read_tokens=F("cache_read_tokens") + usage.cache_read_tokens,
        cost_usd=F("cost_usd") + cost,
    )
    if is_turn_model:
        fields["model"] = model
        turn.model = model
    if renew_lease is not None:
        fields["lease_expires_at"] = timezone.now() + renew_lease
    for field, value in usage.as_fields().items():
        setattr(turn, field, getattr(turn, field) + value)
    turn.cost_usd += cost
    return fields, cost


# No savepoint when nested (the agent loop's step transaction): a failure here
# fails the whole step anyway, and the savepoint costs two statements per call.
@transaction.atomic(savepoint=False)
def turn_add_usage(
    *, turn: Turn, model: str, usage: Usage, renew_lease=None, is_turn_model: bool = True
) -> None:
    """Add a call's tokens and cost to the turn and its team. A call to another model
    made during the turn (a consultant) has `is_turn_model` false: the turn keeps
    speaking with its own model."""
    fields, cost = turn_usage_fields(
        turn=turn, model=model, usage=usage, renew_lease=renew_lease, is_turn_model=is_turn_model
    )
    locks.team_add(turn.team_id, add={"spent_usd": cost})  # the team's row before the turn's
    Turn.objects.filter(pk=turn.pk).update(**fields)


@transaction.atomic(savepoint=False)
def team_add_usage(*, team: Team, model: str, usage: Usage) -> None:
    """A model call made outside any turn (a tool run through the API): its cost is
    the team's all the same."""
    locks.team_add(team.pk, add={"spent_usd": cost_of(model, usage)})


@transaction.atomic(savepoint=False)
def model_call_record(
    *,
    team: Team,
    model: str,
    usage: Usage,
    purpose: str,
    turn: Turn | None = None,
    agent=None,
    reply: str = "",
) -> ModelCall:
    """A model call a tool made (smart retrieval): counted on its turn, or on the team
    when there is none, and recorded with what it was for (the spend's per-tool cut)."""
    if turn is not None:
        turn_add_usage(turn=turn, model=model, usage=usage, is_turn_model=False)
    else:
        team_add_usage(team=team, model=model, usage=usage)
    return ModelCall.objects.create(
        team=team,
        turn=turn,
        agent=agent,
        purpose=purpose,
        model=model,
        cost_usd=cost_of(model, usage),
        reply=reply,
        **usage.as_fields(),
    )
