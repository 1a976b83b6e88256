"""Budget warnings: when a team has used 80% of its turn or cost budget, or an agent
80% of its own cost budget, its PM is told once per budget, live
(events.BudgetWarning, naming the agent for an agent's) and through its webhooks
(budget.warning). The team's cost_warned_at / turns_warned_at and the agent's
cost_warned_at record that it was told, with a conditional update, so racing
finishes warn once."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from teams import services
from teams.errors import InvalidInput
from teams.integrations import webhooks
from teams.lib.catalog import MILLION, price_for, price_problem
from teams.live import events
from teams.live.event_payloads import PMRequestOut
from teams.models import (
    BUDGET_CHOICES,
    Agent,
    BudgetKind,
    Consultation,
    ModelCall,
    PMRequest,
    Team,
    Turn,
    WebhookEvent,
)
from teams.run import locks
from teams.run.lifecycle import TeamAction

WARN_PERCENT = 80


@transaction.atomic(savepoint=False)
def budget_check(team: Team) -> list[str]:
    """Warn about each budget `team` (a fresh row, e.g. locked) has used 80% of for
    the first time; the budgets warned about now ("cost", "turns")."""
    warned = []
    spent, max_cost = Decimal(team.spent_usd), Decimal(team.max_cost_usd)
    if max_cost > 0 and spent * 100 >= max_cost * WARN_PERCENT and team.cost_warned_at is None:
        if _first_warning(team, "cost_warned_at"):
            _warn(team, "cost", float(spent), float(max_cost), float(spent / max_cost * 100))
            warned.append("cost")
    turns, max_turns = team.turn_count, team.max_turns
    if max_turns > 0 and turns * 100 >= max_turns * WARN_PERCENT and team.turns_warned_at is None:
        if _first_warning(team, "turns_warned_at"):
            _warn(team, "turns", turns, max_turns, turns / max_turns * 100)
            warned.append("turns")
    return warned


@transaction.atomic(savepoint=False)
def agent_budget_check(team: Team, agent: Agent) -> bool:
    """Warn when `agent` has used 80% of its own cost budget for the first time (True).
    An agent without one costs no query: this runs after every turn."""
    cap = agent.max_cost_usd
    if cap is None or cap <= 0 or agent.cost_warned_at is not None:
        return False
    spent = agent_spent(agent)
    if spent * 100 < cap * WARN_PERCENT:
        return False
    # Taken only if the cap is still the one measured against: a cap raised meanwhile
    # (its warning armed again) is not warned about on this figure.
    now = timezone.now()
    if not Agent.objects.filter(pk=agent.pk, cost_warned_at__isnull=True, max_cost_usd=cap).update(
        cost_warned_at=now
    ):
        return False
    agent.cost_warned_at = now
    _warn(team, "cost", float(spent), float(cap), float(spent / cap * 100), agent=agent)
    return True


def _first_warning(team: Team, field: str) -> bool:
    now = timezone.now()
    taken = Team.objects.filter(pk=team.pk, **{f"{field}__isnull": True}).update(**{field: now})
    if taken:
        setattr(team, field, now)
    return bool(taken)


def _warn(team: Team, budget: str, used, limit, percent: float, agent: Agent | None = None) -> None:
    fields = {"budget": budget, "used": used, "limit": limit, "percent": round(percent, 1)}
    if agent is not None:  # the agent's own budget: named (a team's has no "agent")
        fields["agent"] = agent.name
    webhooks.webhooks_notify(team=team, event=WebhookEvent.BUDGET_WARNING, payload=fields)
    events.publish(events.BudgetWarning(team=team.slug, team_id=team.id, **fields), team_id=team.id)


# --- budgets as PM decisions -----------------------------------------------------
#
# At a cap the team pauses with a PM request of the budget kind, answered with a
# quick choice or a new cap. Every model call is checked before it is made, a turn's
# (call_blocked) and a tool's (call_refusal: consultations, smart retrieval), on an
# estimate of its cost: one that would cross the team's or its agent's cost budget is
# not made, and neither is a call to a model with no price.

RAISE_CHOICE, DOUBLE_CHOICE, STOP_CHOICE = BUDGET_CHOICES
_FACTORS = {RAISE_CHOICE.lower(): Decimal("1.5"), DOUBLE_CHOICE.lower(): Decimal(2)}
MAX_COST_CAP = Decimal("999999")  # what Team.max_cost_usd (10 digits, 4 places) holds
MAX_TURN_CAP = 1_000_000
CHARS_PER_TOKEN = 4


def budget_reached(team: Team) -> str:
    """The team budget (BudgetKind) that is used up, or ""."""
    if team.turn_count >= team.max_turns:
        return BudgetKind.TURNS
    if team.spent_usd >= team.max_cost_usd:
        return BudgetKind.COST
    return ""


def agent_spent(agent: Agent) -> Decimal:
    """What the agent's turns cost (their consultations and tool calls included), and
    the model calls its tools made outside any turn (run through the API)."""
    total = Decimal(0)
    for rows in (
        Turn.objects.filter(agent=agent),
        Consultation.objects.filter(agent=agent, turn__isnull=True),
        ModelCall.objects.filter(agent=agent, turn__isnull=True),
    ):
        total += Decimal(rows.aggregate(total=Sum("cost_usd"))["total"] or 0)
    return total


def agent_budget_reached(agent: Agent) -> bool:
    return agent.max_cost_usd is not None and agent_spent(agent) >= agent.max_cost_usd


def spend_refusal(*, team: Team, agent: Agent) -> str:
    """Why `agent` may not start anything that costs now, as a turn would not start
    (teams.run.turns.enqueue_next): the team's cost budget or the agent's own is used up.
    The team then pauses with a budget request (one: none while one is open), and the
    reason is returned; "" when it may spend. For a tool run outside a turn (the API)."""
    team = Team.objects.get(pk=team.pk)
    if team.spent_usd >= team.max_cost_usd:
        budget_stop(team=team, budget=BudgetKind.COST)
        return _reason(team, BudgetKind.COST, None)
    if agent_budget_reached(agent):
        budget_stop(team=team, budget=BudgetKind.COST, agent=agent)
        return _reason(team, BudgetKind.COST, agent)
    return ""


def call_estimate(*, model: str, system, messages, tools, max_tokens: int) -> Decimal:
    """What a model call may cost at most, before it is made: its input at four
    characters a token (system, tools and messages as sent) and `max_tokens` of
    output, at the model's prices."""
    price = price_for(model)
    if price is None or not (price.input or price.output):
        return Decimal(0)  # a free model (the offline one): nothing to measure
    chars = sum(len(json.dumps(part, ensure_ascii=False)) for part in (system, tools, messages))
    tokens = Decimal(chars // CHARS_PER_TOKEN)
    return ((tokens * price.input + max_tokens * price.output) / MILLION).quantize(
        Decimal("0.000001")
    )


@dataclass(frozen=True)
class Refusal:
    """Why a model call is not made: its model has no price (`reason` says how to add
    one), or it would cross a cost budget (`note`, the conversation's words; `agent`
    when it is the agent's own budget)."""

    reason: str
    over_budget: bool = False
    agent: Agent | None = None

    @property
    def text(self) -> str:
        """What a tool answers the model, "Error: ..."."""
        if not self.over_budget:
            return f"Error: {self.reason}."
        return (
            f"Error: {self.reason} The team is paused until the PM decides on the budget "
            "(a budget request in the PM inbox): finish your turn with what you have."
        )

    def stop(self, team: Team) -> None:
        """Pause the team with a budget request, as the loop does at a blocked call
        (nothing for a refusal that is not about a budget)."""
        if self.over_budget:
            budget_stop(team=team, budget=BudgetKind.COST, agent=self.agent, note=self.reason)


def budget_refusal(
    *,
    team: Team,
    agent: Agent | None,
    estimate: Decimal,
    about: str,
    reserved=Decimal(0),
    fresh: bool = False,
) -> Refusal | None:
    """Would a call estimated at `estimate` (after `reserved` dollars of calls of the
    same batch, not yet counted) cross the team's cost budget or its agent's? Read from
    fresh rows (the caller's when it says they are `fresh`); None when it fits."""
    if not fresh:
        team = Team.objects.get(pk=team.pk)
    about = f"{about} (up to ${estimate:.2f})"
    if team.spent_usd + reserved + estimate > team.max_cost_usd:
        return Refusal(f"{about} would cross the team's cost budget; it was not made.", True)
    if agent is not None:
        if not fresh:
            agent = Agent.objects.get(pk=agent.pk)
        if agent.max_cost_usd is not None and (
            agent_spent(agent) + reserved + estimate > agent.max_cost_usd
        ):
            note = f"{about} would cross its own cost budget; it was not made."
            return Refusal(note, True, agent)
    return None


def call_refusal(
    *,
    team: Team,
    agent: Agent | None,
    model: str,
    system,
    messages,
    tools,
    max_tokens: int,
    about: str,
    reserved=Decimal(0),
) -> tuple[Decimal, Refusal | None]:
    """The pre-call check of every model call a tool makes (a consultant's, smart
    retrieval's), the same as a turn's (call_blocked): a model with no price is refused,
    and so is a call that would cross the team's or the agent's cost budget. The
    call's estimate and the refusal, or None when it may be made. The caller answers
    refusal.text and calls refusal.stop(team) (once for a batch): the team then pauses
    with a budget request, as it does when a turn's call is blocked."""
    unpriced = price_problem(model)
    if unpriced:
        return Decimal(0), Refusal(unpriced)
    estimate = call_estimate(
        model=model, system=system, messages=messages, tools=tools, max_tokens=max_tokens
    )
    refusal = budget_refusal(
        team=team, agent=agent, estimate=estimate, about=about, reserved=reserved
    )
    return estimate, refusal


def call_blocked(
    *, turn: Turn, model: str, system, messages, tools, max_tokens: int, claimed: bool = False
) -> bool:
    """Would this call of a turn cross the team's cost budget or its agent's? Then it is
    not to be made: the team pauses with a budget request (True). (A model with no
    price is refused by its provider: the turn fails saying so.) `claimed`: the turn's
    team and agent rows were read with its claim, just before its first call, and
    serve as they are; later calls read them again."""
    estimate = call_estimate(
        model=model, system=system, messages=messages, tools=tools, max_tokens=max_tokens
    )
    if claimed:
        team, agent = turn.team, turn.agent
    else:
        team = Team.objects.get(pk=turn.team_id)
        agent = Agent.objects.get(pk=turn.agent_id)
    refusal = budget_refusal(
        team=team,
        agent=agent,
        estimate=estimate,
        about=f"The next model call of {agent.name}",
        fresh=True,
    )
    if refusal is None:
        return False
    refusal.stop(team)
    return True


def budget_question(team: Team, budget: str, agent: Agent | None = None) -> str:
    if budget == BudgetKind.TURNS:
        return f"Turn budget reached: {team.turn_count} of {team.max_turns} turns"
    if agent is not None:
        return (
            f"Budget reached: ${agent_spent(agent):.2f} of ${agent.max_cost_usd:.2f} "
            f"(the budget of {agent.name})"
        )
    return f"Budget reached: ${team.spent_usd:.2f} of ${team.max_cost_usd:.2f}"


@transaction.atomic
def budget_stop(*, team: Team, budget: str, agent: Agent | None = None, note: str = ""):
    """Pause the team at a budget and ask the PM (a budget request), unless a
    request is open already (the PM resumed without answering it). The request, or
    None when one was open."""
    caller, team = team, locks.team_lock(team)
    question = budget_question(team, budget, agent)
    services.system_note(
        team,
        f"{note + ' ' if note else ''}{_reason(team, budget, agent)} The team is paused "
        "until the PM decides (a budget request in the PM inbox): raise the budget or stop.",
    )
    services.team_transition(team=team, action=TeamAction.HALT)
    caller.status = team.status  # the caller's copy says what happened (an action's report)
    if PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).exists():
        return None
    request = PMRequest.objects.create(
        team=team, kind=PMRequest.Kind.BUDGET, budget=budget, agent=agent, question=question
    )
    payload = PMRequestOut.of(request)
    events.publish(events.PMRequestOpened(request=payload), team_id=team.id)
    webhooks.webhooks_notify(
        team=team, event=WebhookEvent.PM_REQUEST_OPENED, payload=payload.model_dump(mode="json")
    )
    return request


def _reason(team: Team, budget: str, agent: Agent | None) -> str:
    """As the team's page has always said it, e.g. "Turn budget reached (3 of 3 turns)."."""
    if budget == BudgetKind.TURNS:
        return f"Turn budget reached ({team.turn_count} of {team.max_turns} turns)."
    if agent is not None:
        return (
            f"Cost budget of {agent.name} reached "
            f"(${agent_spent(agent):.2f} of ${agent.max_cost_usd:.2f})."
        )
    return f"Cost budget reached (${team.spent_usd:.2f} of ${team.max_cost_usd:.2f})."


@dataclass(frozen=True)
class BudgetDecision:
    """A budget request's answer, checked: a new cap, or stop (new_cap None)."""

    budget: str
    agent: Agent | None
    old_cap: Decimal | int
    new_cap: Decimal | int | None


def budget_decision(*, request: PMRequest, answer: str) -> BudgetDecision:
    """Read the PM's answer to a budget request: "Raise by 50%", "Double", "Stop" or a
    new cap (dollars for a cost budget, turns for the turn budget). A new cap must be
    above what is used already; anything else is an InvalidInput and changes nothing."""
    team = Team.objects.get(pk=request.team_id)
    agent = request.agent if request.budget == BudgetKind.COST else None
    turns_budget = request.budget == BudgetKind.TURNS
    if turns_budget:
        cap, used, shown = team.max_turns, team.turn_count, (lambda n: f"{n} turns")
    elif agent is not None:
        cap, used, shown = agent.max_cost_usd or Decimal(0), agent_spent(agent), _dollars
    else:
        cap, used, shown = team.max_cost_usd, team.spent_usd, _dollars
    said = " ".join(answer.strip().lower().rstrip(".!").split())
    if said == STOP_CHOICE.lower():
        return BudgetDecision(request.budget, agent, cap, None)
    if said in _FACTORS:
        new = cap * _FACTORS[said]
        new = math.ceil(new) if turns_budget else new.quantize(Decimal("0.01"), ROUND_CEILING)
    else:
        new = _figure(said, turns_budget)
    if new is None:
        unit = "a number of turns, e.g. 300" if turns_budget else "a figure in dollars, e.g. $7.50"
        raise InvalidInput(
            f"Answer a budget request with {', '.join(BUDGET_CHOICES[:-1])}, "
            f"{STOP_CHOICE} or {unit}.",
            field="answer",
        )
    if new <= used:
        raise InvalidInput(
            f"A budget of {shown(new)} is not above the {shown(used)} used already; "
            "give a higher one, or Stop.",
            field="answer",
        )
    if new > (MAX_TURN_CAP if turns_budget else MAX_COST_CAP):
        raise InvalidInput(f"A budget of {shown(new)} is more than Loom records.", field="answer")
    return BudgetDecision(request.budget, agent, cap, new)


def _dollars(value) -> str:
    return f"${value:,.2f}"


def _figure(said: str, turns_budget: bool):
    """A new cap as the PM wrote it: ASCII digits only ("١٥٠" is no figure, as "-5" is
    not), a decimal point for dollars."""
    if turns_budget:
        return int(said) if re.fullmatch(r"[0-9]{1,9}", said) else None
    match = re.fullmatch(r"\$?\s*([0-9]{1,9}(?:\.[0-9]{1,4})?)", said.replace(",", ""))
    return Decimal(match.group(1)) if match else None


@transaction.atomic
def budget_apply(*, team: Team, decision: BudgetDecision, who: str) -> None:
    """Set the new cap, say who did it in the conversation, and re-arm the 80% warning
    for the new cap; or, for Stop, say that the team stays paused."""
    if decision.budget == BudgetKind.TURNS:
        what, shown, field = "Turn budget", (lambda n: f"{n}"), "turns_warned_at"
    elif decision.agent is not None:
        what, shown, field = f"Cost budget of {decision.agent.name}", _dollars, None
    else:
        what, shown, field = "Cost budget", _dollars, "cost_warned_at"
    if decision.new_cap is None:
        services.system_note(
            team,
            f"{what} kept at {shown(decision.old_cap)} by {who}: the team stays paused.",
        )
        return
    if decision.agent is not None:
        Agent.objects.filter(pk=decision.agent.pk).update(
            max_cost_usd=decision.new_cap, cost_warned_at=None
        )
        decision.agent.max_cost_usd, decision.agent.cost_warned_at = decision.new_cap, None
    elif decision.budget == BudgetKind.TURNS:
        Team.objects.filter(pk=team.pk).update(max_turns=decision.new_cap, turns_warned_at=None)
    else:
        Team.objects.filter(pk=team.pk).update(max_cost_usd=decision.new_cap, cost_warned_at=None)
    team.refresh_from_db()
    services.system_note(
        team, f"{what} raised from {shown(decision.old_cap)} to {shown(decision.new_cap)} by {who}."
    )
    if field:
        setattr(team, field, None)
