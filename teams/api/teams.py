"""Teams: list, create, read, change, and the PM's start / pause / resume."""

from ninja import Router, Status

from teams import services
from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.teams import TeamCloneIn, TeamIn, TeamOut, TeamPatch
from teams.errors import InvalidInput
from teams.history import cloning
from teams.run import team_actions
from teams.run.lifecycle import PM_ACTIONS
from tools import registry

router = Router(tags=["teams"])

# The workspace is a folder on the server: only superusers name it (as in the admin).
WORKSPACE_DOING = "set a team's workspace folder (a folder on the server)"


@router.get("/teams", response=responses({200: list[TeamOut]}), operation_id="teams_list")
def teams_list(request):
    """The teams this caller may reach: a team token's own; a user's managed teams."""
    teams = caller(request).teams().prefetch_related("agents", "consultants").order_by("slug")
    return [TeamOut.of(team) for team in teams]


@router.post("/teams", response=responses({201: TeamOut}, 400, 409), operation_id="teams_create")
def teams_create(request, payload: TeamIn):
    """Create a team (and its agents); an account token or a staff session only."""
    who = caller(request)
    who.require_team_creator()
    if payload.workspace:
        who.require_superuser(WORKSPACE_DOING)
    manager = None if who.user.is_superuser else who.user
    team = services.team_create(**payload.model_dump(), manager=manager)
    return Status(201, TeamOut.of(team))


@router.get("/teams/{team}", response=responses({200: TeamOut}, 404), operation_id="teams_get")
def teams_get(request, team: str):
    return TeamOut.of(caller(request).team(team))


@router.patch(
    "/teams/{team}", response=responses({200: TeamOut}, 400, 404, 409), operation_id="teams_update"
)
def teams_update(request, team: str, payload: TeamPatch):
    """Change a team's settings; only the fields given change."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("change the team's settings")
    given = payload.model_dump(exclude_unset=True, exclude_none=True)
    if "workspace" in given:
        who.require_superuser(WORKSPACE_DOING)
    consultants = given.pop("consultants", None)
    for tool in given.get("tool_approvals", {}):
        if registry.get(tool) is None:
            raise InvalidInput(
                f"No built-in tool named {tool!r}; MCP tools' policies are set on their server.",
                field="tool_approvals",
            )
    for tool in given.get("tool_access", {}):
        if registry.get(tool) is None:
            raise InvalidInput(
                f"No tool named {tool!r}; GET /api/tools lists them.", field="tool_access"
            )
    for field, value in given.items():
        setattr(row, field, value)
    services.team_update(team=row, fields=list(given), consultants=consultants)
    row.refresh_from_db()
    return TeamOut.of(row)


@router.post(
    "/teams/{team}/clone",
    response=responses({201: TeamOut}, 400, 404, 409),
    operation_id="teams_clone",
)
def teams_clone(request, team: str, payload: TeamCloneIn):
    """Run the team again: a fresh idle team with the same goal, phases, plan, budgets,
    managers, agents (fresh counters) and anchors, and a copy of its workspace files;
    nothing of its conversation or turns. A person who manages the team may do this (a
    staff session or an account token; not a team token). A taken slug is a 409, an
    invalid one a 422."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("run the team again")
    who.require_person("run the team again")
    slug = payload.slug or cloning.next_free_slug(row.slug)
    clone = cloning.team_clone(team=row, slug=slug, name=payload.name, user=who.user)
    return Status(201, TeamOut.of(clone))


def _lifecycle_operation(action):
    def operation(request, team: str):
        who = caller(request)
        row = who.team(team)
        who.require_pm(f"{action.value} the team")
        row = team_actions.PM_ACTION_SERVICES[action](team=row)
        row.refresh_from_db()
        return TeamOut.of(row)

    operation.__name__ = f"teams_{action.value}"
    operation.__doc__ = (
        f"{action.label} the team, through the same state table as the pages; a "
        "transition its status does not allow is a 409 that says why."
    )
    router.post(
        f"/teams/{{team}}/{action.value}",
        response=responses({200: TeamOut}, 404, 409),
        operation_id=operation.__name__,
    )(operation)


for _action in PM_ACTIONS:
    _lifecycle_operation(_action)
