"""Which tools exist, who gets them, and how a call is dispatched.

Tool modules register their classes with @register; TOOL_MODULES lists the
modules so adding a tool group is adding a module and one line here."""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace

from django.db import transaction
from pydantic import ValidationError

from teams import mesh
from teams.errors import LoomError, ModelError
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


def toolset(agent, team) -> list[type[Tool]]:
    """The tools this agent may use now (role and phase decide)."""
    return [tool for tool in _load().values() if tool.available_to(agent, team)]


def definitions(tools: list[type[Tool]], team=None) -> list[dict]:
    """The Anthropic tool definitions, as the team's agents see them."""
    return [tool.definition_for(team) for tool in tools]


def execute(
    name: str, arguments, ctx: ToolContext, allowed=None, record: Callable | None = None
) -> ToolResult:
    """Validate and run one tool call; every outcome is a result, never an exception.

    `record(result)` (the agent loop's step) is written in the same transaction as
    the tool's own writes, so a worker that dies between the two cannot leave a tool
    that ran without its step, which a resumed turn would run again. Tools that call
    a model are the exception: no transaction stays open across a model call."""
    tool = get(name)
    if tool is not None and not tool.calls_model and record is not None:
        with transaction.atomic():
            result = _execute(tool, name, arguments, ctx, allowed)
            record(result)
        return result
    result = _execute(tool, name, arguments, ctx, allowed)
    if record is not None:
        record(result)
    return result


def _execute(tool, name: str, arguments, ctx: ToolContext, allowed) -> ToolResult:
    if tool is None or (allowed is not None and tool not in allowed):
        if tool is not None:  # its role or phase does not allow it: a violation (seed 004)
            mesh.agent_record_violation(agent=ctx.agent)
        return ToolResult(f"Error: Unknown tool {name!r} (not available to you).", is_error=True)
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
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors()
        )
        return ToolResult(f"Error: Invalid arguments for {name}: {problems}", is_error=True)
    # A failed tool leaves no half-written rows; one that calls a model holds no
    # transaction open meanwhile.
    guard = nullcontext() if tool.calls_model else transaction.atomic()
    try:
        with guard:
            result = tool().run(params, ctx)
    except LoomError as exc:
        if tool.failures_are_results and not isinstance(exc, ModelError):
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


def _digest(tool, params, result: ToolResult) -> str:
    try:
        return tool.digest(params, result)
    except Exception:  # a record is a courtesy: never fail a call that ran
        log.exception("Digest of %s failed", tool.name)
        return ""
