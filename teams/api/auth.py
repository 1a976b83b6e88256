"""Authentication and rate limits: Bearer tokens and staff sessions both become a
teams.access.Caller on `request.auth`."""

from django.conf import settings
from ninja.security import HttpBearer, SessionAuthIsStaff
from ninja.throttling import AuthRateThrottle

from teams.access import Caller, caller_for_token, caller_for_user


class TokenAuth(HttpBearer):
    """`Authorization: Bearer <token>`: a team token or an account token.

    A request that carries a Bearer token is judged by it alone: a refused token
    (unknown, revoked, expired) is a 401 saying why, never a fall-through to the
    staff session (whose CSRF check would answer 403). A read-only token is refused
    every method but GET here, once for every operation there is or will be."""

    def authenticate(self, request, token: str) -> Caller:
        who = caller_for_token(token)  # Unauthenticated: 401 with the reason
        who.require_method(request.method, f"{request.method} {request.path}")
        return who


class StaffSession(SessionAuthIsStaff):
    """A staff user logged in to the site; ninja checks CSRF on unsafe methods."""

    def authenticate(self, request, key) -> Caller | None:
        user = super().authenticate(request, key)
        return caller_for_user(user) if user else None


class CallerThrottle(AuthRateThrottle):
    """LOOM_API_RATE requests per token (or staff user); over it, 429 and Retry-After."""

    scope = "loom"

    def __init__(self):
        super().__init__(settings.LOOM_API_RATE)

    def allow_request(self, request) -> bool:
        if self.rate != settings.LOOM_API_RATE:  # changed since start (tests do)
            self.rate = settings.LOOM_API_RATE
            self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request)


def caller(request) -> Caller:
    return request.auth
