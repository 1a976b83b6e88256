"""The exceptions services raise for expected failures.

The API maps each to one JSON error shape ({"error": code, "detail": message}) and
its status; tools turn them into friendly text for the model; the admin shows them
as form errors.
"""


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
    """The request is valid but clashes with the current state (a duplicate, a race lost)."""

    code = "conflict"
    status = 409


class PermissionDenied(LoomError):
    code = "forbidden"
    status = 403
