"""Model endpoints: anyone reads their names and whether each can be called now; a
superuser adds, changes and removes them and reads how each is reached."""

from ninja import Router, Status

from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.model_endpoints import (
    ModelEndpointIn,
    ModelEndpointOut,
    ModelEndpointPatch,
)
from teams.integrations import model_endpoints

router = Router(tags=["model endpoints"])


def _details(request) -> bool:
    who = caller(request)
    return who.user is not None and who.user.is_superuser


def _superuser(request, doing: str) -> None:
    caller(request).require_superuser(f"{doing} (model endpoints serve every team)")


def _out(request, name: str) -> ModelEndpointOut:
    return ModelEndpointOut.of(model_endpoints.endpoint_get(name), details=_details(request))


@router.get(
    "/model-endpoints",
    response=responses({200: list[ModelEndpointOut]}),
    operation_id="model_endpoints_list",
)
def model_endpoints_list(request):
    """Every endpoint, built in or added, by name."""
    details = _details(request)
    return [ModelEndpointOut.of(v, details=details) for v in model_endpoints.endpoint_list()]


@router.post(
    "/model-endpoints",
    response=responses({201: ModelEndpointOut}, 400, 409),
    operation_id="model_endpoints_create",
)
def model_endpoints_create(request, payload: ModelEndpointIn):
    """Add an endpoint (one named like a built-in replaces it)."""
    _superuser(request, "add model endpoints")
    row = model_endpoints.model_endpoint_add(**payload.model_dump())
    return Status(201, _out(request, row.name))


@router.get(
    "/model-endpoints/{name}",
    response=responses({200: ModelEndpointOut}, 404),
    operation_id="model_endpoints_get",
)
def model_endpoints_get(request, name: str):
    return _out(request, name[:32])


@router.patch(
    "/model-endpoints/{name}",
    response=responses({200: ModelEndpointOut}, 400, 404),
    operation_id="model_endpoints_update",
)
def model_endpoints_update(request, name: str, payload: ModelEndpointPatch):
    """Change an endpoint's settings; a built-in's become the superuser's own."""
    _superuser(request, "change model endpoints")
    changes = payload.model_dump(exclude_unset=True)
    if "api" in changes and changes["api"] is not None:
        changes["api"] = str(changes["api"])
    row = model_endpoints.model_endpoint_update(name=name[:32], changes=changes)
    return _out(request, row.name)


@router.delete(
    "/model-endpoints/{name}",
    response=responses({204: None}, 404, 409),
    operation_id="model_endpoints_delete",
)
def model_endpoints_delete(request, name: str):
    """Remove an endpoint no agent or consultant names (a changed built-in goes back to
    how Loom ships it; a built-in itself stays)."""
    _superuser(request, "remove model endpoints")
    model_endpoints.model_endpoint_remove(name=name[:32])
    return Status(204, None)
