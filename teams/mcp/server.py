"""Loom as an MCP server: one MCPServer (the official SDK's) built for each caller.

A PM's token (an account token or a team token) gets the PM's tools; a token bound
to an agent gets those of the agent's own tools it can call (the registry's, as the
agent loop runs them; not MCP servers' tools nor ones that wait for approval) and
read_context, so a program can take the agent's seat. Every tool calls the services
the REST API calls, with the API's permission checks; a Loom error is a tool
error whose text is the API's message. A read-only token gets the reading tools only:
a writing tool is refused with the reason.

Tools run the ORM through database_sync_to_async (Channels'): one thread for the
database, old connections closed around each call, as the sockets do."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, Literal, NamedTuple

from channels.db import database_sync_to_async
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool
from pydantic import BaseModel, Field, ValidationError

from teams import selectors
from teams.access import Caller
from teams.api.agents import agent_context
from teams.api.paging import MAX_ID, PAGE_DEFAULT, PAGE_MAX
from teams.api.schemas.messages import ANCHOR_KEY_MAX
from teams.api.tools import run_tool
from teams.conversation import pm_requests
from teams.errors import LoomError, NotFound
from teams.live.event_payloads import MessageOut, PMRequestOut, TeamStatusOut
from teams.models import HUMAN_TEXT_LIMIT, Agent, ApprovalPolicy, PMRequest, Team
from teams.run import team_actions
from teams.run.lifecycle import TeamAction
from tools import registry
from tools.base import Tool

NAME = "loom"
RECENT_MESSAGES = 5  # the conversation's latest lines in team_status
SEAT_TOOLS = {"read_context"}  # an agent's seat's own tools, besides the registry's

TeamSlug = Annotated[str, Field(description="The team's slug (list_teams).")]
Text = Annotated[str, Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)]
RequestId = Annotated[int, Field(gt=0, le=MAX_ID, description="The request's id.")]

PM_INSTRUCTIONS = (
    "Loom runs teams of LLM agents; you are their PM. list_teams shows your teams, "
    "list_pm_requests what they wait for (questions, budget and approval requests), "
    "answer_pm_request answers one and the team resumes. team_status shows a team's "
    "state and latest lines; post_message speaks in its conversation; start_team, "
    "pause_team and resume_team drive it."
)


# --- results ----------------------------------------------------------------------


def ok(payload: Any, text: str | None = None) -> CallToolResult:
    """A tool's answer: the payload as JSON text (and structured), or `text` first."""
    data = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
    body = json.dumps(data, indent=1, ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=f"{text}\n{body}" if text else body)],
        structured_content=data,
    )


def error(message: str) -> CallToolResult:
    """A tool error with the API's message."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def read_only_refusal(doing: str) -> str:
    return f"This token is read-only: it cannot {doing}."


def on_database(fn: Callable[..., CallToolResult]) -> Callable[..., Any]:
    """An async tool (the SDK reads `fn`'s signature) running `fn` on the database
    thread; a Loom error becomes a tool error with its message."""

    def guarded(**arguments) -> CallToolResult:
        try:
            return fn(**arguments)
        except LoomError as exc:
            return error(exc.message)

    @functools.wraps(fn)
    async def tool(**arguments) -> CallToolResult:
        return await database_sync_to_async(guarded)(**arguments)

    return tool


# --- the server ---------------------------------------------------------------------


class Seat(NamedTuple):
    """An agent-bound token's agent, and its tools' definitions as the agent gets them
    now (read on the database thread when the server is built)."""

    team: Team
    agent: Agent
    definitions: list[dict]


class LoomServer(MCPServer):
    """An MCPServer for one caller. `refusals`: tools this caller may not call (a
    read-only token's writing tools), each with the reason; `seat`: the agent whose
    registry tools it lists and runs, for an agent-bound token."""

    def __init__(
        self,
        who: Caller,
        *,
        instructions: str,
        refusals: dict[str, str] | None = None,
        seat: Seat | None = None,
    ):
        super().__init__(NAME, title="Loom", instructions=instructions, version="1")
        self.who = who
        self.refusals = refusals or {}
        self.seat = seat

    async def list_tools(self) -> list[MCPTool]:
        listed = await super().list_tools()
        if self.seat is None:
            return listed
        for definition in self.seat.definitions:
            listed.append(
                MCPTool(
                    name=definition["name"],
                    description=definition["description"],
                    input_schema=definition["input_schema"],
                )
            )
        return listed

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        if name in self.refusals:
            return error(self.refusals[name])
        tool = registry.get(name) if self.seat is not None else None
        if tool is not None and name not in SEAT_TOOLS:
            return await database_sync_to_async(self._run_agent_tool)(tool, arguments)
        return await super().call_tool(name, arguments, context)

    def _run_agent_tool(self, tool: type[Tool], arguments: dict[str, Any]) -> CallToolResult:
        """The tool as the API runs it for this token (teams.api.tools.run_tool)."""
        team, agent = self.seat.team, self.seat.agent
        try:
            params = tool.Params.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            return error(f"Error: Invalid arguments for {tool.name}: {problems}")
        try:
            out = run_tool(self.who, tool, team.slug, agent.name, params)
        except LoomError as exc:
            return error(exc.message)
        data = out.model_dump(mode="json")
        return CallToolResult(
            content=[TextContent(type="text", text=out.result)],
            structured_content=data,
            is_error=out.is_error,
        )


def server_for(who: Caller) -> LoomServer:
    """The MCP server this caller sees (runs on the database thread)."""
    if who.agent_id is not None:
        return agent_server(who)
    return pm_server(who)


def _read_only(who: Caller) -> bool:
    return bool(who.token is not None and who.token.read_only)


# --- a PM's tools -------------------------------------------------------------------

PM_WRITES = {
    "answer_pm_request": "answer the PM's requests",
    "post_message": "post as the PM",
    "start_team": "start the team",
    "pause_team": "pause the team",
    "resume_team": "resume the team",
}


def pm_server(who: Caller) -> LoomServer:
    read_only = _read_only(who)
    refusals = {name: read_only_refusal(doing) for name, doing in PM_WRITES.items()}
    server = LoomServer(who, instructions=PM_INSTRUCTIONS, refusals=refusals if read_only else None)
    for tool in pm_tools(who):
        if not (read_only and tool.__name__ in PM_WRITES):
            server.add_tool(on_database(tool))
    return server


def pm_tools(who: Caller) -> list[Callable[..., CallToolResult]]:
    """The PM's tools for `who`, each a closure over the caller."""

    def list_teams() -> CallToolResult:
        """The teams you may reach, each with its status, budget and what you may do
        now (start, pause, resume)."""
        teams = who.teams().order_by("slug")
        return ok({"teams": [_team_line(team) for team in teams]})

    def team_status(team: TeamSlug) -> CallToolResult:
        """A team's state: status, phase, turns and spend against the budget, its open
        request for you (if any) and the latest lines of its conversation."""
        row = who.team(team)
        recent = selectors.team_conversation(team=row).select_related("recipient")
        recent = list(recent.order_by("-id")[:RECENT_MESSAGES])
        open_request = selectors.team_open_pm_request(team=row)
        return ok(
            {
                **_team_line(row),
                "open_pm_request": _request_out(open_request) if open_request else None,
                "recent_messages": [
                    MessageOut.of(m).model_dump(mode="json") for m in reversed(recent)
                ],
            }
        )

    def list_pm_requests(
        team: TeamSlug | None = None,
        status: Literal["open", "answered", "cancelled"] | None = "open",
        limit: Annotated[int, Field(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
    ) -> CallToolResult:
        """The requests your teams made of you, newest first: open ones by default
        (status null: all). A question takes any answer; a budget request takes one of
        its `choices` or a new cap; an approval request takes approve or deny."""
        teams = Team.objects.filter(pk=who.team(team).pk) if team else who.teams()
        requests = PMRequest.objects.filter(team__in=teams).select_related("team", "agent")
        if status is not None:
            requests = requests.filter(status=status)
        return ok({"requests": [_request_out(r) for r in requests.order_by("-id")[:limit]]})

    def answer_pm_request(
        team: TeamSlug,
        request_id: RequestId,
        answer: Text,
        pin_as: Annotated[
            str | None,
            Field(
                max_length=ANCHOR_KEY_MAX,
                description="Also pin the answer as the anchor of this key: in every later prompt.",
            ),
        ] = None,
        note: Annotated[
            str | None,
            Field(max_length=HUMAN_TEXT_LIMIT, description="An approval's note to the agent."),
        ] = None,
        arguments: Annotated[
            dict[str, Any] | None,
            Field(description="An approval's changed tool arguments (approve with these)."),
        ] = None,
    ) -> CallToolResult:
        """Answer an open request of a team (a question, a budget or an approval
        request): the answer joins the conversation and the team resumes."""
        row = who.team(team)
        who.require_pm("answer the PM's requests")
        if not row.pm_requests.filter(pk=request_id).exists():
            raise NotFound(f"Team {row.slug!r} has no PM request {request_id}.")
        extra: dict[str, Any] = {}
        if note:
            extra["note"] = note
        if arguments is not None:
            extra["arguments"] = arguments
        answered = pm_requests.pm_request_answer(
            request_id=request_id,
            answer=answer,
            user=who.user,
            pin_as=pin_as or "",
            changed_by=who.label,
            **extra,
        )
        answered.team.refresh_from_db()
        return ok(
            {"request": _request_out(answered), "team": _team_line(answered.team)},
            text=f"Answered request {answered.id}; team {answered.team.slug!r} is "
            f"{answered.team.get_status_display().lower()}.",
        )

    def post_message(team: TeamSlug, content: Text) -> CallToolResult:
        """Post in a team's conversation as the PM: the next speaker sees it."""
        row = who.team(team)
        who.require_pm("post as the PM")
        message = pm_requests.pm_message_post(team=row, content=content, user=who.user)
        return ok(MessageOut.of(message))

    def lifecycle(action: TeamAction):
        def operation(team: TeamSlug) -> CallToolResult:
            row = who.team(team)
            who.require_pm(f"{action.value} the team")
            report = team_actions.team_pm_action(team=row, action=action)
            row.refresh_from_db()
            return ok(_team_line(row), text=report.text)

        operation.__name__ = f"{action.value}_team"
        operation.__doc__ = (
            f"{action.label} a team, through the same state table as the pages; a change "
            "its status does not allow is refused with the reason."
        )
        return operation

    return [
        list_teams,
        team_status,
        list_pm_requests,
        answer_pm_request,
        post_message,
        lifecycle(TeamAction.START),
        lifecycle(TeamAction.PAUSE),
        lifecycle(TeamAction.RESUME),
    ]


def _team_line(team: Team) -> dict:
    return {"name": team.name, "goal": team.goal, **TeamStatusOut.of(team).model_dump()}


def _request_out(request: PMRequest) -> dict:
    return PMRequestOut.of(request).model_dump(mode="json")


# --- an agent's seat ----------------------------------------------------------------


def seat_tools(agent: Agent, team: Team) -> list[type[Tool]]:
    """The agent's tools a program in its seat can call: the registry's own that run at
    once. Its team's MCP tools (`<server>__<tool>`) and a tool that waits for the PM's
    approval run only inside the agent's turn, so listing them would only lead to a
    refusal."""
    return [
        tool
        for tool in registry.toolset(agent, team)
        if registry.get(tool.name) is tool and registry.policy(tool, team) == ApprovalPolicy.AUTO
    ]


def agent_server(who: Caller) -> LoomServer:
    agent = Agent.objects.select_related("team").get(pk=who.agent_id)
    team = agent.team
    read_only = _read_only(who)
    tools = [] if read_only else seat_tools(agent, team)
    seat = Seat(team, agent, [tool.definition_for(team) for tool in tools])
    refusals = (
        {tool.name: read_only_refusal("run agent tools") for tool in registry.all_tools()}
        if read_only
        else None
    )
    server = LoomServer(
        who,
        instructions=(
            f"You act as agent {agent.name!r} ({agent.role}) of Loom team {team.slug!r}: "
            "read_context shows what the agent would see on its turn; its tools act as it."
        ),
        refusals=refusals,
        seat=seat,
    )

    def read_context(
        after: Annotated[
            int, Field(ge=0, le=MAX_ID, description="The last message id you have seen.")
        ] = 0,
        limit: Annotated[int, Field(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
    ) -> CallToolResult:
        """What the agent would see on its turn: the phase's conversation, the phase
        summaries and its inbox (queries with their IDs, answers, peer messages), newer
        than `after`; poll with the returned `next_after`."""
        return ok(agent_context(who, team.slug, agent.name, after=after, limit=limit))

    server.add_tool(on_database(read_context))
    return server
