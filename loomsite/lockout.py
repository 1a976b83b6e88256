"""Login lockout (django-axes) per user and address, and per address alone.

Axes counts failed logins per (username, address): AXES_FAILURE_LIMIT (5) wrong
passwords for one user from one address lock that pair out for AXES_COOLOFF_TIME
(15 minutes). That alone lets one address try one password on every account, so
this handler also counts an address's failures across every username it tried:
LOOM_LOGIN_ADDRESS_FAILURES (default 20) within the cool-off lock the address out
for every username, until its oldest failures are older than the cool-off.

The address count is separate (not AXES_LOCKOUT_PARAMETERS): there a parameter
shares the one AXES_FAILURE_LIMIT, and a successful login would clear every failure
of its address, so an attacker with one working account could reset the count. Here
a success clears only its own user's failures from that address."""

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum


def address_failures(request) -> int:
    """Failed logins from the request's address, any username, within the cool-off."""
    attempts = AccessAttempt.objects.filter(ip_address=request.axes_ip_address)
    if settings.AXES_COOLOFF_TIME is not None:
        attempts = attempts.filter(attempt_time__gte=get_cool_off_threshold(request))
    return attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0


class LoginLockout(AxesDatabaseHandler):
    """Axes' database handler, plus the per-address count (the module's docstring)."""

    def get_failures(self, request, credentials=None) -> int:
        failures = super().get_failures(request, credentials)
        if address_failures(request) >= settings.LOOM_LOGIN_ADDRESS_FAILURES:
            # Reported as the user limit reached: axes then locks out as it does for
            # a (username, address) pair, with the same response and log line.
            return max(failures, get_failure_limit(request, credentials))
        return failures
