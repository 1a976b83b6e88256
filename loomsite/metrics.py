"""GET /metrics: the deployment's Prometheus metrics (teams.observability.metrics builds them).

Who may scrape: with LOOM_METRICS_TOKEN set, a request with `Authorization: Bearer
<token>`; without it, loopback clients only (the client's address as
LOOM_TRUSTED_PROXIES reads it, so a proxy on the same host does not make every
visitor local). Anyone else gets a 403 (401 with a wrong or missing token). The
metrics name teams by slug only."""

import hmac
import ipaddress
import logging

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from loomsite.client_ip import client_ip
from teams.observability import metrics as loom_metrics

log = logging.getLogger("loom.metrics")


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def refusal(request) -> JsonResponse | None:
    token = settings.LOOM_METRICS_TOKEN
    if token:
        scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token):
            return None
        response = JsonResponse(
            {"detail": "Scraping /metrics needs Authorization: Bearer <LOOM_METRICS_TOKEN>."},
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if _loopback(client_ip(request)):
        return None
    return JsonResponse(
        {"detail": "Only loopback clients may scrape /metrics; set LOOM_METRICS_TOKEN."},
        status=403,
    )


def live_sockets() -> int | None:
    """The live sockets of every process (their slots), or None when unknown."""
    from channels.layers import get_channel_layer

    from teams.web.slots import socket_slots

    try:
        return async_to_sync(socket_slots(get_channel_layer()).count)()
    except Exception:  # Redis is away: leave the figure out rather than fail the scrape
        log.warning("Could not count the live sockets", exc_info=True)
        return None


@never_cache
@require_GET
def metrics(request):
    refused = refusal(request)
    if refused is not None:
        return refused
    body, content_type = loom_metrics.exposition(live_sockets=live_sockets())
    return HttpResponse(body, content_type=content_type)
