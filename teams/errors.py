"""The exceptions services raise for expected failures, and the one place where
Django's own errors become them.

Each has its HTTP status; the API answers it as {"detail": message} (teams.api.site),
tools turn it into friendly text for the model, and pages and the admin show it as
a message or a form error.
"""

from __future__ import annotations

from contextlib import contextmanager

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, transaction


class LoomError(Exception):
    code = "error"
    status = 400

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(LoomError):
    code = "invalid"
    status = 400


class NotFound(LoomError):
    code = "not_found"
    status = 404


class Conflict(LoomError):
    """The request is valid but clashes with the current state (a duplicate, a race lost,
    a transition the team's status does not allow)."""

    code = "conflict"
    status = 409


class Unauthenticated(LoomError):
    """No credentials, or a token that is refused (unknown, revoked, expired); the
    message says which, and what to do."""

    code = "unauthenticated"
    status = 401


class PermissionDenied(LoomError):
    code = "forbidden"
    status = 403


class RateLimited(LoomError):
    """Too many of one kind of request by the same person within a period."""

    code = "rate_limited"
    status = 429


class ModelError(LoomError):
    """A model call failed after the provider's retries, or cannot be made at all
    (no API key for the model, an unknown model id); the message says why."""

    code = "model_error"
    status = 502


class McpUnavailable(LoomError):
    """A team's MCP server could not be reached or misbehaved (crashed, hung past
    LOOM_MCP_TIMEOUT, answered garbage); the message says which server and why."""

    code = "mcp_unavailable"
    status = 502


def invalid_from(exc: ValidationError) -> InvalidInput:
    """The first problem of a Django ValidationError, as the service error."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.error_dict.items():
            message = " ".join(m for e in errors for m in e.messages)
            return InvalidInput(message, field=None if field == NON_FIELD_ERRORS else field)
    return InvalidInput(" ".join(exc.messages))


def validated(instance, *, exclude=None, validate_unique=False) -> None:
    """Run the model's own validation (field validators, choices, constraints) and
    raise InvalidInput: the rules are written once, on the model."""
    try:
        instance.full_clean(
            exclude=exclude, validate_unique=validate_unique, validate_constraints=False
        )
    except ValidationError as exc:
        raise invalid_from(exc) from None


@contextmanager
def integrity_as(error: LoomError):
    """Turn a database constraint violation into the service's own error.

    The savepoint keeps an outer transaction usable after the failed statement."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        raise error from exc
