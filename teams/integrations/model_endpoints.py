"""Model endpoints as data: add, change and remove them (superusers), list them, and
say whether a model id can be used now and why not.

The built-in endpoints (teams.lib.endpoints.BUILTINS) are always there; a row named
like one replaces it, and removing that row brings the built-in back."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from teams.errors import Conflict, InvalidInput, NotFound, integrity_as, validated
from teams.lib import endpoints
from teams.lib.catalog import price_problem
from teams.models import Agent, ConsultantProfile, ModelEndpoint

ENDPOINT_SETTINGS = ("name", "api", "base_url", "key_env", "header_vars", "local")


@dataclass(frozen=True)
class EndpointView:
    """One endpoint as the list shows it: `problem` is why it cannot be used now."""

    endpoint: endpoints.Endpoint
    builtin: bool  # shipped with Loom (possibly replaced by a row)
    changed: bool  # a row replaces or adds it
    problem: str

    @property
    def usable(self) -> bool:
        return not self.problem


def endpoint_list() -> list[EndpointView]:
    rows = set(ModelEndpoint.objects.values_list("name", flat=True))
    return [
        EndpointView(e, e.name in endpoints.BUILTINS, e.name in rows, e.problem())
        for e in endpoints.endpoint_table().values()
    ]


def endpoint_get(name: str) -> EndpointView:
    found = next((view for view in endpoint_list() if view.endpoint.name == name), None)
    if found is None:
        raise NotFound(f"No model endpoint named {name!r}.")
    return found


def _row_for(name: str) -> ModelEndpoint:
    """The endpoint's row, or an unsaved one copied from its built-in."""
    row = ModelEndpoint.objects.filter(name=name).first()
    if row is not None:
        return row
    builtin = endpoints.BUILTINS.get(name)
    if builtin is None:
        raise NotFound(f"No model endpoint named {name!r}.")
    return ModelEndpoint(
        name=builtin.name,
        api=builtin.api,
        base_url=builtin.base_url,
        key_env=builtin.key_env,
        header_vars=dict(builtin.header_vars),
        local=builtin.local,
    )


def _save(row: ModelEndpoint) -> ModelEndpoint:
    validated(row)  # the fields' rules and clean(): a private address only when local
    duplicate = Conflict(f"A model endpoint named {row.name!r} already exists.", field="name")
    with integrity_as(duplicate):
        row.save()
    return row


@transaction.atomic
def model_endpoint_add(
    *,
    name: str,
    api: str,
    base_url: str = "",
    key_env: str = "",
    header_vars: dict | None = None,
    local: bool = False,
) -> ModelEndpoint:
    """A new endpoint, or one that replaces a built-in of that name."""
    if ModelEndpoint.objects.filter(name=name).exists():
        raise Conflict(
            f"A model endpoint named {name!r} already exists: change it instead.", field="name"
        )
    row = ModelEndpoint(
        name=name,
        api=api,
        base_url=base_url,
        key_env=key_env,
        header_vars=header_vars or {},
        local=local,
    )
    return _save(row)


@transaction.atomic
def model_endpoint_update(*, name: str, changes: dict) -> ModelEndpoint:
    """Change an endpoint's settings (a built-in's become a row that replaces it).
    Its name stays: model ids written with it would lose their endpoint."""
    unknown = set(changes) - set(ENDPOINT_SETTINGS)
    if unknown:
        raise InvalidInput(f"Not an endpoint setting: {', '.join(sorted(unknown))}.")
    if "name" in changes and changes["name"] != name:
        raise InvalidInput(
            "An endpoint's name cannot change (model ids name it); add a new endpoint.",
            field="name",
        )
    row = _row_for(name)
    for field, value in changes.items():
        setattr(row, field, {} if field == "header_vars" and value is None else value)
    return _save(row)


def endpoint_users(name: str) -> list[str]:
    """Who names the endpoint in a model id: agents (team/agent) and consultants."""
    prefix = f"{name}/"
    agents = Agent.objects.filter(model__startswith=prefix).select_related("team")
    users = [f"agent {a.team.slug}/{a.name}" for a in agents.order_by("team__slug", "name")]
    profiles = ConsultantProfile.objects.filter(model__startswith=prefix)
    users += [f"consultant {p.name}" for p in profiles]
    if name == endpoints.ANTHROPIC_ENDPOINT:
        if Agent.objects.filter(model__startswith=endpoints.CLAUDE_PREFIX).exists():
            users.append("the agents on claude-… models")
    return users


@transaction.atomic
def model_endpoint_remove(*, name: str) -> str:
    """Remove an endpoint nobody's model names; a replaced built-in comes back. What
    happened, in words."""
    row = ModelEndpoint.objects.select_for_update().filter(name=name).first()
    if row is None:
        if name in endpoints.BUILTINS:
            raise Conflict(f"{name!r} is a built-in endpoint: it cannot be removed.")
        raise NotFound(f"No model endpoint named {name!r}.")
    if name not in endpoints.BUILTINS:
        users = endpoint_users(name)
        if users:
            shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
            raise Conflict(
                f"The endpoint {name!r} is in use ({shown}): give them other models first."
            )
    row.delete()
    if name in endpoints.BUILTINS:
        return f"Endpoint {name!r} is the built-in one again."
    return f"Endpoint {name!r} removed."


def model_id_problem(model_id: str) -> str:
    """Why an agent, a consultant or LOOM_MODEL cannot use this model id now (unknown
    endpoint, key variable unset, no price), or "" when it can."""
    route = endpoints.route(model_id)
    if route.problem:
        return route.problem
    if route.endpoint is not None and route.endpoint.problem():
        return route.endpoint.problem()
    return price_problem(model_id)
