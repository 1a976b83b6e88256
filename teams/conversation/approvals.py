"""Approvals: a tool call whose policy is `ask` waits for the PM.

The turn stops at the call (status waiting; no worker holds it), a PM request of kind
approval says who wants to call what, with which arguments and why. The answer
(Approve, Always approve, Deny, with an optional note and, to approve, optionally
edited arguments) re-queues the turn; it resumes at that step, the model is not called
again, and the call runs or is refused (teams.engine.loop). Either way its result says
so: an approved call's result opens with the PM's approval (approved_notice), a denied
one's is the PM's refusal with the PM's reason (denied_text)."""

from __future__ import annotations

import json

from django.db import transaction
from django.utils import timezone

from teams import services
from teams.errors import Conflict, InvalidInput
from teams.integrations import webhooks
from teams.integrations.mcp_servers import SEPARATOR
from teams.lib import tool_schemas
from teams.live import events
from teams.live.event_payloads import PMRequestOut
from teams.models import (
    ALWAYS_APPROVE,
    APPROVAL_CHOICES,
    APPROVE,
    DENY,
    ApprovalPolicy,
    McpServer,
    PMRequest,
    Team,
    Turn,
    WebhookEvent,
)
from teams.run import locks, turns
from teams.run.lifecycle import TeamAction

ARGUMENTS_SHOWN = 4000  # characters of the arguments the question shows
WHY_SHOWN = 1000


# --- policies --------------------------------------------------------------------


def mcp_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of an MCP tool's offered name `<server>__<tool>`, else None."""
    server, sep, tool = name.partition(SEPARATOR)
    return (server, tool) if sep and server and tool else None


def tool_policy(team: Team, name: str) -> ApprovalPolicy:
    """The team's policy for a built-in tool: it runs unless the team says otherwise
    (an MCP tool has its server's: teams.integrations.mcp_servers.mcp_tool_policy)."""
    return ApprovalPolicy((team.tool_approvals or {}).get(name, ApprovalPolicy.AUTO))


def _always_approve(team: Team, name: str) -> None:
    """Set the tool's policy to auto: on its server for an MCP tool, on the team else."""
    parts = mcp_name(name)
    server = McpServer.objects.filter(team=team, name=parts[0]).first() if parts else None
    if server is not None:
        server.tool_approvals = {**server.tool_approvals, parts[1]: ApprovalPolicy.AUTO}
        server.save(update_fields=["tool_approvals", "updated_at"])
        return
    Team.objects.filter(pk=team.pk).update(
        tool_approvals={**(team.tool_approvals or {}), name: ApprovalPolicy.AUTO}
    )


# --- asking ----------------------------------------------------------------------


def approval_question(*, agent: str, tool: str, arguments: dict, why: str) -> str:
    shown = json.dumps(arguments, indent=2, ensure_ascii=False)
    if len(shown) > ARGUMENTS_SHOWN:
        shown = shown[:ARGUMENTS_SHOWN] + "\n… (cut; the full arguments are on the request)"
    lines = [f"{agent} wants to call {tool} with these arguments:", shown]
    if why.strip():
        lines += ["", f"Why ({agent}): {why.strip()[:WHY_SHOWN]}"]
    lines += ["", "Approve, Always approve (this tool, this team), or Deny (with a note)."]
    return "\n".join(lines)


@transaction.atomic
def approval_request_open(
    *, turn: Turn, tool: str, tool_use_id: str, arguments: dict, input_schema: dict, why: str
) -> PMRequest:
    """Stop the turn at the call and ask the PM. Conflict when the team already has an
    open PM request (one at a time): the caller tells the agent to try later."""
    team = locks.team_lock(turn.team)
    if PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).exists():
        raise Conflict(
            f"{tool} needs the PM's approval, and the PM already has an open request; "
            "try again after it is answered."
        )
    request = PMRequest.objects.create(
        team=team,
        agent=turn.agent,
        turn=turn,
        kind=PMRequest.Kind.APPROVAL,
        question=services.without_nul(
            approval_question(agent=turn.agent.name, tool=tool, arguments=arguments, why=why)
        ),
        tool_name=tool,
        tool_use_id=tool_use_id,
        arguments=arguments,
        input_schema=input_schema,
    )
    services.team_transition(team=team, action=TeamAction.AWAIT_PM)
    out = PMRequestOut.of(request)
    events.publish(events.PMRequestOpened(request=out), team_id=team.id)
    webhooks.webhooks_notify(
        team=team, event=WebhookEvent.APPROVAL_REQUESTED, payload=out.model_dump(mode="json")
    )
    return request


def approval_for(turn: Turn, tool_use_id: str) -> PMRequest | None:
    """The approval request of one call of a turn, if it was asked."""
    return (
        PMRequest.objects.filter(turn=turn, kind=PMRequest.Kind.APPROVAL, tool_use_id=tool_use_id)
        .order_by("-id")
        .first()
    )


# --- answering -------------------------------------------------------------------


def approval_check(
    request: PMRequest, *, answer: str, note: str, arguments, pin_as: str
) -> tuple[str, dict | None]:
    """(the decision, the edited arguments or None); a bad combination is refused
    before anything changes."""
    choice = next((c for c in APPROVAL_CHOICES if c.lower() == answer.strip().lower()), None)
    if choice is None:
        raise InvalidInput(
            "Answer an approval request with "
            + ", ".join(f"'{c}'" for c in APPROVAL_CHOICES)
            + ".",
            field="answer",
        )
    if pin_as:
        raise InvalidInput("An approval's answer is not pinned as an anchor.", field="pin_as")
    services.human_text_check(note or "", field="note")
    if arguments is None:
        return choice, None
    if choice == DENY:
        raise InvalidInput("Edited arguments go with Approve, not Deny.", field="arguments")
    if not isinstance(arguments, dict):
        raise InvalidInput("Edited arguments are a JSON object.", field="arguments")
    try:  # never fetches a $ref, runs patterns in linear time, bounds the nesting
        problem = tool_schemas.arguments_problem(
            arguments, request.input_schema or {"type": "object"}
        )
    except tool_schemas.SchemaUnusable as exc:
        raise InvalidInput(
            f"{request.tool_name}'s arguments cannot be edited: its input schema {exc}.",
            field="arguments",
        ) from None
    if problem:
        raise InvalidInput(
            f"The edited arguments do not fit {request.tool_name}'s schema: {problem}",
            field="arguments",
        )
    return choice, arguments


@transaction.atomic
def approval_answer(
    request: PMRequest, *, answer: str, note: str, arguments, user, pin_as: str
) -> PMRequest:
    """Record the decision (once), and let the waiting turn go on: the team resumes
    and the turn is queued again."""
    choice, edited = approval_check(
        request, answer=answer, note=note, arguments=arguments, pin_as=pin_as
    )
    claimed = PMRequest.objects.filter(pk=request.pk, status=PMRequest.Status.OPEN).update(
        status=PMRequest.Status.ANSWERED,
        answer=choice,
        note=(note or "").strip(),
        approved_arguments=edited,
        answered_by=user if user is not None and user.is_authenticated else None,
        answered_at=timezone.now(),
    )
    request.refresh_from_db()
    if not claimed:
        raise Conflict(f"This PM request was already {request.status}.")
    team = locks.team_lock(request.team)
    if choice == ALWAYS_APPROVE:
        _always_approve(team, request.tool_name)
    who = "the PM" if user is None else f"the PM ({user.get_username()})"
    agent = request.agent.name if request.agent_id else "an agent"
    verdict = {
        APPROVE: f"{who} approved {agent}'s call of {request.tool_name}.",
        ALWAYS_APPROVE: f"{who} approved {agent}'s call of {request.tool_name} and will "
        "approve later calls of it without asking.",
        DENY: f"{who} denied {agent}'s call of {request.tool_name}.",
    }[choice]
    services.system_note(team, verdict)
    events.publish(events.PMRequestAnswered(request=PMRequestOut.of(request)), team_id=team.id)
    if services.team_transition(team=team, action=TeamAction.PM_ANSWERED):
        turns.enqueue_next(team)
    return request


def approval_outcome(request: PMRequest) -> tuple[str, dict | None, str]:
    """(decision, arguments to run with or None for the original, note)."""
    return request.answer, request.approved_arguments, request.note


# --- what the model reads of the decision -------------------------------------------


def _shown(value, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def denied_text(note: str) -> str:
    """The result of a call the PM denied, with the PM's reason when given."""
    reason = f' (the PM\'s reason: "{note.strip()}")' if note.strip() else ""
    return (
        f"Error: the PM denied this call{reason}. It did not run. Do not make it again "
        "unless the PM or the coach asks you to; carry on without it."
    )


def approved_notice(request: PMRequest, arguments: dict) -> str:
    """What the result of a call the PM approved opens with: that the PM approved it
    (and later calls of the tool, for Always approve), what the PM changed in the
    `arguments` the model gave, and the PM's note."""
    head = "The PM approved this call"
    if request.answer == ALWAYS_APPROVE:
        head += f", and later calls of {request.tool_name} will run without asking"
    said = [f"{head}."]
    edited = request.approved_arguments
    if edited is not None:
        changed = "; ".join(
            f"{key} = {_shown(value)}"
            for key, value in edited.items()
            if arguments.get(key) != value
        )
        dropped = ", ".join(key for key in arguments if key not in edited)
        said.append(
            "The PM changed your arguments before it ran; the result below is for the "
            f"changed ones. Changed: {changed or 'none'}"
            + (f"; removed: {dropped}." if dropped else ".")
        )
    if request.note.strip():
        said.append(f"The PM's note: {request.note.strip()}")
    return "[" + " ".join(said) + "]\n\n"
