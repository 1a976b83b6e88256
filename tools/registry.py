"""Which tools exist, who gets them, and how a call is dispatched.

Tool modules register their classes with @register; TOOL_MODULES lists the
modules so adding a tool group is adding a module and one line here."""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace

from django.db import transaction
from pydantic import ValidationError

from teams.conversation import approvals, hierarchy
from teams.errors import LoomError, ModelError, PermissionDenied
from teams.integrations import consultations
from teams.models import ApprovalPolicy, Team, TeamStatus
from tools.base import Tool, ToolContext, ToolResult, truncate

log = logging.getLogger("loom.tools")

TOOL_MODULES = [
    "tools.conversation",
    "tools.peers",
    "tools.questions",
    "tools.context",
    "tools.mesh",
    "tools.consult",
    "tools.workspace",
    "tools.commands",
]
_REGISTRY: dict[str, type[Tool]] = {}
_loaded = False


def register(cls: type[Tool]) -> type[Tool]:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise RuntimeError(f"Two tools are named {cls.name!r}.")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> dict[str, type[Tool]]:
    global _loaded
    if not _loaded:
        for module in TOOL_MODULES:
            importlib.import_module(module)
        _loaded = True
    return _REGISTRY


def all_tools() -> list[type[Tool]]:
    return list(_load().values())


def get(name: str) -> type[Tool] | None:
    return _load().get(name)


def team_tools(team) -> list[type[Tool]]:
    """Every tool of a team that can do something for it now: the built-in ones and its
    MCP servers' (`never` ones and those whose Tool.refusal gives a reason left out:
    they are not offered at all)."""
    from tools.mcp import mcp_tools

    builtin = [
        t
        for t in _load().values()
        if policy(t, team) != ApprovalPolicy.NEVER and not t.refusal(team)
    ]
    return builtin + mcp_tools(team)


def toolset(agent, team) -> list[type[Tool]]:
    """The tools this agent may use now (role, phase and approval policy decide)."""
    return [tool for tool in team_tools(team) if tool.available_to(agent, team)]


def abilities(roles, team, phase: str) -> dict[str, tuple[list[str], list[str]]]:
    """What an agent of each of `roles` can do in `phase` beyond discussing and reading,
    by the tools it has then (Tool.ability; "with the PM's approval" where the team's
    policy asks), and what it can do in other phases of the team, with those phases:
    {role: (now, later)}. One pass over the tools for the whole roster: a tool's
    access, policy and the phases it allows are the same for every role."""
    found = {role: ([], []) for role in roles}
    for tool in _load().values():
        if not tool.ability or policy(tool, team) == ApprovalPolicy.NEVER:
            continue
        allowed, phase_allowed, _words = tool.access(team)
        takers = [r for r in found if allowed is None or r in allowed]
        if not takers or tool.refusal(team):
            continue
        if phase_allowed(phase):
            asks = policy(tool, team) == ApprovalPolicy.ASK
            for role in takers:
                found[role][0].append(tool.ability + (" (with the PM's approval)" if asks else ""))
            continue
        phases = [p for p in team.phases if phase_allowed(p)]
        if phases:
            for role in takers:
                found[role][1].append(f"{tool.ability} in {', '.join(phases)}")
    return found


# What a process keeps of the team toolsets it built: the team's tools and their
# definitions, by everything they depend on (which of them an agent gets is decided
# on each turn: its role and the phase). The team's fields count all but those no
# tool's definition reads, which move on every turn or phase (a field added to Team
# is in the key until it is listed here: safe, if slower).
KEPT_TOOLSETS = 256
TEAM_FIELDS_NOT_READ = frozenset(
    {
        "turn_count",
        "spent_usd",
        "event_seq",
        "updated_at",
        "cost_warned_at",
        "turns_warned_at",
        "next_speaker",
        "context_version",
        "status",  # state_refusal reads it afresh for each call
        "phase_index",  # the phase: Tool.available_to, on each turn
        "plan",
    }
)
_kept: OrderedDict[tuple, tuple[tuple, dict]] = OrderedDict()
_kept_lock = threading.Lock()


def forget(team=None) -> None:
    """Drop the toolsets this process keeps (of one team, or all)."""
    with _kept_lock:
        for key in list(_kept):
            if team is None or key[0] == team.pk:
                del _kept[key]


def turn_toolset(agent, team, stamp: tuple[str, str] | None = None, messages=None):
    """(toolset, definitions) for the agent's turn. With `stamp` (the stamps of the
    team's MCP servers and consultants its claim read: teams.engine.prompts.Claimed)
    the team's tools and definitions are built once per process while it and the
    team's settings stay the same; without, built afresh. With `messages` (the turn's
    history) the tools that can do nothing in it are left out (Tool.refusal_for)."""
    if stamp is None:
        tools = _useful(toolset(agent, team), agent, messages)
        return tools, definitions(tools, team)
    key = (team.pk, stamp, _team_settings(team))
    with _kept_lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
    if kept is None:
        every = team_tools(team)
        kept = (tuple(every), dict(zip(every, definitions(every, team), strict=True)))
        read = consultations.profiles_read(team)  # kept only if the stamp names what was read
        if read is None or read == sorted(json.loads(stamp[1])):
            with _kept_lock:
                _kept[key] = kept
                while len(_kept) > KEPT_TOOLSETS:
                    _kept.popitem(last=False)
    tools = [tool for tool in kept[0] if tool.available_to(agent, team)]
    tools = _useful(tools, agent, messages)
    return tools, [kept[1][tool] for tool in tools]


def _useful(tools: list[type[Tool]], agent, messages) -> list[type[Tool]]:
    if messages is None:
        return tools
    return [tool for tool in tools if not tool.refusal_for(agent, messages)]


def _team_settings(team) -> tuple:
    values = []
    for field in team._meta.concrete_fields:
        if field.primary_key or field.name in TEAM_FIELDS_NOT_READ:
            continue
        value = getattr(team, field.attname)
        if isinstance(value, dict | list):
            value = json.dumps(value, sort_keys=True)
        values.append(value)
    return tuple(values)


def find(name: str, team) -> type[Tool] | None:
    """A tool of the team by its offered name, MCP tools included."""
    return get(name) or next((t for t in team_tools(team) if t.name == name), None)


def policy(tool: type[Tool], team) -> ApprovalPolicy:
    """Whether a call of `tool` runs at once, waits for the PM, or is never offered:
    an MCP tool carries its server's (read with the toolset), a built-in one the team's."""
    if team is None:
        return ApprovalPolicy.AUTO
    mcp_policy = getattr(tool, "approval", None)
    if mcp_policy is not None:
        return mcp_policy
    return approvals.tool_policy(team, tool.name)


# Said in the description of a tool whose calls wait for the PM: the model should
# know the team pauses, and that its text before the call is the PM's reason.
ASKS_THE_PM = (
    " Each call waits for the PM's approval and the team pauses until then: before the "
    "call, say in your text why you need it (the PM reads it with the arguments). The PM "
    "may approve it, change its arguments or deny it."
)


def definitions(tools: list[type[Tool]], team=None) -> list[dict]:
    """The Anthropic tool definitions, as the team's agents see them."""
    found = []
    for tool in tools:
        definition = tool.definition_for(team)
        if team is not None and policy(tool, team) == ApprovalPolicy.ASK:
            definition = {**definition, "description": definition["description"] + ASKS_THE_PM}
        found.append(definition)
    return found


def execute(
    name: str, arguments, ctx: ToolContext, allowed=None, record: Callable | None = None
) -> ToolResult:
    """Validate and run one tool call; every outcome is a result, never an exception.

    `record(result)` (the agent loop's step) is written in the same transaction as
    the tool's own writes, so a worker that dies between the two cannot leave a tool
    that ran without its step, which a resumed turn would run again. Tools that call
    a model are the exception: no transaction stays open across a model call."""
    tool = next((t for t in allowed if t.name == name), None) if allowed else None
    tool = tool or get(name)
    if tool is not None and not (tool.calls_model or tool.runs_long) and record is not None:
        with transaction.atomic():
            result = _execute(tool, name, arguments, ctx, allowed)
            record(result)
        return result
    result = _execute(tool, name, arguments, ctx, allowed)
    if record is not None:
        record(result)
    return result


def state_refusal(tool: type[Tool], team: Team) -> str:
    """Why the team's state does not allow `tool` now, or "" when it does: read fresh,
    whatever the caller's copy of the team says. A finished team is only read."""
    status = Team.objects.filter(pk=team.pk).values_list("status", flat=True).first()
    if status is None:
        return f"team {team.slug} no longer exists."
    status = TeamStatus(status)
    if tool.writes and status == TeamStatus.DONE:
        return (
            f"team {team.slug} is finished; {tool.name} would change it, and a finished "
            "team can only be read (its conversation, files, keepers and questions)."
        )
    if tool.statuses is not None and status not in tool.statuses:
        allowed = " or ".join(TeamStatus(s).label.lower() for s in sorted(tool.statuses))
        return (
            f"team {team.slug} is {status.label.lower()}; {tool.name} works only while "
            f"the team is {allowed}."
        )
    return ""


def _execute(tool, name: str, arguments, ctx: ToolContext, allowed) -> ToolResult:
    if tool is not None and allowed is not None and tool not in allowed:
        # Nobody on the team can use it now, or it can do nothing in this request (no
        # question open to answer): not the agent's fault.
        refused = tool.refusal(ctx.team) or tool.refusal_for(ctx.agent, ctx.messages)
        if refused:
            return ToolResult(f"Error: {refused}", is_error=True)
    if tool is None or (allowed is not None and tool not in allowed):
        if tool is not None:  # its role or phase does not allow it: a violation (seed 004)
            hierarchy.agent_record_violation(agent=ctx.agent)
        return ToolResult(f"Error: Unknown tool {name!r} (not available to you).", is_error=True)
    refused = state_refusal(tool, ctx.team)
    if refused:  # the team's state table, not the agent's rights: no violation
        return ToolResult(f"Error: {refused}", is_error=True)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return ToolResult("Error: Tool arguments must be a JSON object.", is_error=True)
    if not isinstance(arguments, dict):
        return ToolResult("Error: Tool arguments must be a JSON object.", is_error=True)
    try:
        params = tool.Params.model_validate(arguments)
    except ValidationError as exc:
        over = over_cap(exc)
        if over:
            return ToolResult(f"Error: {over}", is_error=True)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors()
        )
        return ToolResult(f"Error: Invalid arguments for {name}: {problems}", is_error=True)
    # A failed tool leaves no half-written rows; one that calls a model holds no
    # transaction open meanwhile.
    guard = nullcontext() if tool.calls_model or tool.runs_long else transaction.atomic()
    try:
        with guard:
            result = tool().run(params, ctx)
    except LoomError as exc:
        # A refusal (PermissionDenied) is an error all the same: the call changed nothing.
        if tool.failures_are_results and not isinstance(exc, (ModelError, PermissionDenied)):
            text = truncate(exc.message, tool.result_limit)
            return ToolResult(text, digest=f"You used {name}. Result: {text[:200]}")
        return ToolResult(f"Error: {exc.message}", is_error=True)
    except Exception as exc:  # a bug: keep the loop alive, tell the model, log it all
        log.exception("Tool %s failed for agent %s", name, ctx.agent.name)
        return ToolResult(f"Error: {name} failed unexpectedly ({type(exc).__name__}).", True)
    if isinstance(result, str):
        result = ToolResult(result)
    result = replace(result, text=truncate(result.text, tool.result_limit))
    return replace(result, digest=_digest(tool, params, result))


def over_cap(exc: ValidationError) -> str:
    """The first text (or list) over its cap, in words ("question is 2,400,000
    characters; the limit is 20,000."), or "" when nothing is too long."""
    for err in exc.errors():
        limit = (err.get("ctx") or {}).get("max_length")
        given = err.get("input")
        if limit is None or not hasattr(given, "__len__"):
            continue
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "string_too_long":
            return f"{where} is {len(given):,} characters; the limit is {limit:,}."
        if err["type"] == "too_long":
            return f"{where} has {len(given):,} items; the limit is {limit:,}."
    return ""


def _digest(tool, params, result: ToolResult) -> str:
    try:
        return tool.digest(params, result)
    except Exception:  # a record is a courtesy: never fail a call that ran
        log.exception("Digest of %s failed", tool.name)
        return ""
