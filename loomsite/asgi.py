import logging
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
# Django must be set up before anything imports models (consumers, routing).
django_asgi_app = get_asgi_application()

from urllib.parse import urlsplit  # noqa: E402

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import WebsocketDenier  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.signals import request_finished  # noqa: E402
from django.db import connections  # noqa: E402
from django.http import Http404  # noqa: E402
from django.http.request import is_same_domain, validate_host  # noqa: E402

from loomsite.mounts import Mount, is_a2a_path, is_mcp_path  # noqa: E402
from teams.web.routing import channel_routes, websocket_urlpatterns  # noqa: E402


def close_request_connections(sender, **kwargs):
    """Under ASGI Django runs each request in a thread of its own (a
    ThreadSensitiveContext), which ends with the request: a connection it kept
    (CONN_MAX_AGE) would stay open, never used again, until garbage collected, and at
    50 requests/s two web processes held PostgreSQL's 100 connections (every further
    request a 500). A request's connections close at its end; a turn worker's threads,
    which live on, keep theirs. (The test client and WSGI keep Django's default.)"""
    if not (isinstance(sender, type) and issubclass(sender, ASGIHandler)):
        return  # ASGIStaticFilesHandler, which wraps the site, is one too
    for connection in connections.all(initialized_only=True):
        connection.close()


request_finished.connect(close_request_connections, dispatch_uid="loom-asgi-close")

if settings.SECRET_KEY_IS_DEFAULT:
    logging.getLogger("loom").warning(
        "LOOM_SECRET_KEY is not set: using the development key. Set it in production."
    )

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_parts(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) origin, the port filled in; None if it is not one."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


def _is_secure(scope) -> bool:
    """Whether the browser reached us over TLS: the connection's scheme, or the
    proxy's header when SECURE_PROXY_SSL_HEADER says to trust it (as Django does)."""
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, secure_value = proxy
        name = header.removeprefix("HTTP_").replace("_", "-").lower().encode("latin1")
        value = _header(scope, name)
        return value is not None and value.split(",")[0].strip() == secure_value
    return False


def _own_origin(scope) -> tuple[str, str, int] | None:
    """The origin of a page this site served: the Host header (one of ALLOWED_HOSTS)
    with the scheme the connection used."""
    host = _header(scope, b"host")
    if not host:
        return None
    own = _origin_parts(f"{'https' if _is_secure(scope) else 'http'}://{host}")
    if own is None:
        return None
    hostname = f"[{own[1]}]" if ":" in own[1] else own[1]
    allowed = settings.ALLOWED_HOSTS or (
        [".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else []
    )
    return own if validate_host(hostname, allowed) else None


def _trusted(origin: tuple[str, str, int]) -> bool:
    """One of CSRF_TRUSTED_ORIGINS (scheme, host and port; `*.example.com` for subdomains)."""
    for entry in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        scheme, _, netloc = entry.strip().lower().partition("://")
        wildcard = netloc.startswith("*.")
        pattern = _origin_parts(f"{scheme}://{netloc[2:] if wildcard else netloc}")
        if pattern is None or (pattern[0], pattern[2]) != (origin[0], origin[2]):
            continue
        if is_same_domain(origin[1], f".{pattern[1]}") if wildcard else origin[1] == pattern[1]:
            return True
    return False


class SameOriginValidator:
    """Lets a WebSocket through only from a page of this site: its Origin must be
    the request's own origin (the Host header, one of ALLOWED_HOSTS, with the
    connection's scheme: scheme, host and port all count) or one of
    CSRF_TRUSTED_ORIGINS. Anything else, a missing Origin included, is refused
    before the handshake completes, except a program's handshake: an Authorization
    header and no Origin (the consumer then checks the token). (Channels'
    AllowedHostsOriginValidator compares host names only, so any other port on
    localhost passed.)"""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards WebSocket connections only")
        raw_origin = _header(scope, b"origin")
        if raw_origin is None and _header(scope, b"authorization"):
            # A program with a token, not a page: browsers always send an Origin and
            # cannot set Authorization on a WebSocket, so no other site can forge this.
            return await self.application(scope, receive, send)
        origin = _origin_parts(raw_origin or "")
        if origin is not None and (origin == _own_origin(scope) or _trusted(origin)):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)


class StaticFiles(ASGIStaticFilesHandler):
    """Static files straight from the apps; a path that climbs out of them
    (`/static/../x`) is a plain 404, not a 500."""

    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousOperation as exc:  # SuspiciousFileOperation: path traversal
            raise Http404("No such static file.") from exc


application = ProtocolTypeRouter(
    {
        # Static files straight from the apps: the embedded mode needs no collectstatic
        # (put a web server or CDN in front in the scaled-out mode).
        # /mcp: the MCP endpoint (teams.mcp), and /a2a/: published teams over A2A
        # (teams.a2a), in front of Django.
        "http": Mount(
            Mount(
                StaticFiles(django_asgi_app), matches=is_mcp_path, endpoint="teams.mcp.asgi.serve"
            ),
            matches=is_a2a_path,
            endpoint="teams.a2a.asgi.serve",
        ),
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        "channel": channel_routes,
    }
)
