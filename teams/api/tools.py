"""The tools: listed with their schemas, and each one its own operation whose
request body is the tool's own parameter model (the same schema the model gets as
its input_schema). Adding a tool to tools/ adds its endpoint here, with no code."""

from ninja import Body, Router

from teams.access import Caller
from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.tools import ToolCallOut, ToolOut, TurnEndOut
from teams.engine.history_rows import history_messages
from teams.engine.loop import tool_context
from teams.errors import Conflict, PermissionDenied
from teams.models import ApprovalPolicy
from teams.run import budgets
from teams.selectors import agent_get
from tools import registry
from tools.base import Tool
from tools.mcp import mcp_tools

router = Router(tags=["tools"])


@router.get("/tools", response=responses({200: list[ToolOut]}, 404), operation_id="tools_list")
def tools_list(request, team: str | None = None):
    """Every tool: its name, description, input schema and who has it; with `team`,
    who has it in that team (its tool access) and the schema its agents get."""
    row = caller(request).team(team) if team else None
    if row is None:
        return [_tool_out(tool, None) for tool in registry.all_tools()]
    return [_tool_out(tool, row) for tool in registry.all_tools() + mcp_tools(row)]


def _tool_out(tool: type[Tool], team) -> ToolOut:
    if team is None:
        roles, phases, rule = tool.roles, tool.phases, tool.phase_rule
        return ToolOut(
            name=tool.name,
            description=tool.description,
            input_schema=tool.definition()["input_schema"],
            roles=sorted(roles) if roles is not None else None,
            phases=sorted(phases) if phases is not None else None,
            phase_rule=rule[0] if rule else "",
        )
    roles, allowed, _words = tool.access(team)
    phases = [phase for phase in team.phases if allowed(phase)]
    definition = tool.definition_for(team)
    return ToolOut(
        name=tool.name,
        description=definition["description"],
        input_schema=definition["input_schema"],
        roles=sorted(roles) if roles is not None else None,
        phases=None if len(phases) == len(team.phases) else phases,
        approval=registry.policy(tool, team),
    )


def run_tool(who: Caller, tool: type[Tool], team: str, agent: str, params) -> ToolCallOut:
    """Run `tool` as `agent` through the registry the agent loop uses."""
    row = who.team(team)
    member = agent_get(team=row, name=agent)
    who.require_agent(member)
    reason = tool.unavailable_reason(member, row)
    if reason:
        raise PermissionDenied(reason)
    refused = registry.state_refusal(tool, row)  # the registry checks it again, as for the loop
    if refused:
        raise Conflict(refused[0].upper() + refused[1:])
    if registry.policy(tool, row) != ApprovalPolicy.AUTO:
        # An approval waits inside an agent's turn, which a program's call has none of.
        raise Conflict(
            f"{tool.name} needs the PM's approval in team {row.slug!r}; an agent asks for it "
            "in its turn. Set its policy to auto to call it through the API."
        )
    if tool.calls_model:  # it may spend: not over a cost budget, as a turn would not start
        over = budgets.spend_refusal(team=row, agent=member)
        if over:
            raise Conflict(
                f"{over} {tool.name} may call a model, so it was not run. The team is paused "
                "until the PM decides (a budget request in the PM inbox)."
            )
    ctx = tool_context(team=row, agent=member, messages=history_messages(member, row))
    # The registry runs the tool in its own transaction (none across a model call).
    result = registry.execute(tool.name, params.model_dump(), ctx)
    end = result.ends_turn
    return ToolCallOut(
        result=result.text,
        is_error=result.is_error,
        outcome=TurnEndOut(kind=end.outcome.value, reason=end.reason) if end else None,
    )


def _tool_operation(tool: type[Tool]) -> None:
    def operation(request, team: str, agent: str, params: tool.Params = Body(...)):
        return run_tool(caller(request), tool, team, agent, params)

    operation.__name__ = f"tool_{tool.name}"
    operation.__doc__ = tool.description
    router.post(
        f"/teams/{{team}}/agents/{{agent}}/tools/{tool.name}",
        response=responses({200: ToolCallOut}, 400, 404, 409),
        operation_id=operation.__name__,
        summary=f"Run {tool.name} as the agent",
    )(operation)


for _tool in registry.all_tools():
    _tool_operation(_tool)
