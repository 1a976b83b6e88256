"""GET /healthz: for load balancers, process supervisors and people. No login; the
body names no team and no secret (teams.observability.health builds it). 200 when healthy, 503
otherwise, with `problems` saying why."""

from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from teams.observability.health import health_report


@never_cache
@require_GET
def healthz(request):
    report = health_report()
    healthy = report.pop("healthy")
    return JsonResponse(report, status=200 if healthy else 503)
