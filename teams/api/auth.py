"""Authentication and rate limits: Bearer tokens and staff sessions both become a
teams.access.Caller on `request.auth`."""

from django.conf import settings
from ninja.security import HttpBearer, SessionAuthIsStaff
from ninja.throttling import AuthRateThrottle

from teams.access import Caller, caller_for_key, caller_for_user


class TokenAuth(HttpBearer):
    """`Authorization: Bearer <token>`: a team token or an account token."""

    def authenticate(self, request, token: str) -> Caller | None:
        return caller_for_key(token)


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
