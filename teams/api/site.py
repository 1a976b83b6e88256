"""The NinjaAPI: authentication, rate limits, the one error shape and the routers.

Every 4xx is {"detail": ...}: a message, or for 422 a list of field errors (ninja's
own validation and the services' InvalidInput alike). Anything unexpected is logged
and answered with a JSON 500 that says nothing of the internals; the hostile-input
tests and schemathesis hold that no request reaches it."""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from teams.api import (
    agents,
    consultants,
    evals,
    forks,
    knowledge,
    mcp_servers,
    messages,
    model_endpoints,
    spend,
    steering,
    teams,
    tokens,
    tools,
    webhooks,
    workspace,
)
from teams.api.auth import CallerThrottle, StaffSession, TokenAuth
from teams.errors import InvalidInput, LoomError, Unauthenticated

log = logging.getLogger("loom.api")

api = NinjaAPI(
    title="Loom API",
    version="1",
    description=(
        "Everything a PM does in the admin and everything an agent does with its tools. "
        "Authenticate with `Authorization: Bearer <token>` (`manage.py create_api_token`) "
        "or a staff session (CSRF token required for unsafe methods). Every error is "
        '`{"detail": ...}`: a message, or a list of field errors for 422.'
    ),
    auth=[TokenAuth(), StaffSession()],
    throttle=[CallerThrottle()],
    urls_namespace="api",
    docs_url="/docs",
    openapi_url="/openapi.json",
)

ROUTERS = (
    teams,
    agents,
    messages,
    knowledge,
    tools,
    tokens,
    consultants,
    workspace,
    webhooks,
    spend,
    mcp_servers,
    forks,
    steering,
    evals,
    model_endpoints,
)
for router in ROUTERS:
    api.add_router("", router.router)


@api.exception_handler(InvalidInput)
def invalid_input(request, exc: InvalidInput):
    loc = ["body", exc.field] if exc.field else ["body"]
    detail = [{"loc": loc, "msg": exc.message, "type": exc.code}]
    return api.create_response(request, {"detail": detail}, status=422)


@api.exception_handler(LoomError)
def loom_error(request, exc: LoomError):
    return api.create_response(request, {"detail": exc.message}, status=exc.status)


@api.exception_handler(AuthenticationError)
def unauthenticated(request, exc):
    return _401(request, "Authentication required: send Authorization: Bearer <token>.")


@api.exception_handler(Unauthenticated)
def token_refused(request, exc: Unauthenticated):
    """A Bearer token refused, with why (unknown or revoked, expired, its user gone)."""
    return _401(request, exc.message)


def _401(request, detail: str):
    response = api.create_response(request, {"detail": detail}, status=401)
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(Http404)
def not_found(request, exc):
    return api.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@api.exception_handler(ValidationError)
def validation_error(request, exc: ValidationError):
    detail = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors
    ]
    return api.create_response(request, {"detail": detail}, status=422)


@api.exception_handler(HttpError)
def http_error(request, exc: HttpError):
    return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def too_big(request, exc: RequestDataTooBig):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    detail = f"The request body is over {limit:,} bytes, the most Loom accepts."
    return api.create_response(request, {"detail": detail}, status=413)


@api.exception_handler(Exception)
def unexpected(request, exc: Exception):
    log.exception("API request %s %s failed", request.method, request.path)
    return api.create_response(request, {"detail": "Internal error; it was logged."}, status=500)
