"""The address a request came from, for login throttling (django-axes).

Behind N trusted proxies that each append to X-Forwarded-For (LOOM_TRUSTED_PROXIES),
the client is the N-th address from the right: the one the outermost trusted proxy
saw. Entries further left are whatever the client sent, and are never believed."""

from django.conf import settings


def client_ip(request) -> str:
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.LOOM_TRUSTED_PROXIES
    if proxies:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        chain = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if len(chain) >= proxies:
            return chain[-proxies]
    return remote
