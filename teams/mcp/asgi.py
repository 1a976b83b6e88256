"""`/mcp` on the site: the MCP Streamable HTTP endpoint, in front of Django (mounted by
loomsite.mounts, which imports this module at the first request for it).

Each request: the Host header is checked against ALLOWED_HOSTS (as Django would), the
Bearer token becomes a Caller (teams.access, as the REST API; no session, no cookie),
the request counts against the caller's LOOM_API_RATE (the API's throttle and
budget), and an MCP server is built for that caller and served in the SDK's
stateless mode.

Stateless, because Daphne (the embedded `manage.py serve` and the scaled-out mode
alike) does not run ASGI lifespan events, which is where the SDK's session manager
is meant to start. A stateless session manager is entered for the one request it
serves (its task group lives as long as the request), so nothing has to start at
boot and no session lives in one process's memory: any process behind a load
balancer answers any request, and each request sees the caller's tools as they are
now (a revoked token is refused at its next request; an agent's tools follow its
phase). Nothing is lost: Loom's tools need no server-to-client requests."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.transport_security import TransportSecuritySettings

from teams.access import bearer_key, caller_for_token
from teams.api.auth import CallerThrottle
from teams.errors import Unauthenticated
from teams.mcp.server import server_for

UNAUTHENTICATED = "Authentication required: send Authorization: Bearer <token>."
# The SDK's DNS-rebinding guard allows localhost only unless told otherwise; Loom
# checks the Host header against ALLOWED_HOSTS itself (one list for the whole site),
# and a request needs a Bearer token, which a rebinding page cannot have.
TRANSPORT = TransportSecuritySettings(enable_dns_rebinding_protection=False)



async def serve(scope, receive, send) -> None:
    if not _host_allowed(scope):
        return await _json(send, 400, {"detail": "Invalid Host header."})
    key = bearer_key(scope.get("headers", []))
    try:  # a refused token is told why (expired, revoked...), as the REST API does
        who = await database_sync_to_async(caller_for_token)(key) if key else None
    except Unauthenticated as exc:
        who, refused = None, exc.message
    else:
        refused = UNAUTHENTICATED
    if who is None:
        return await _json(
            send, 401, {"detail": refused}, headers=[(b"www-authenticate", b"Bearer")]
        )
    throttle = CallerThrottle()  # LOOM_API_RATE: one budget per caller with the REST API
    if not await database_sync_to_async(throttle.allow_request)(SimpleNamespace(auth=who)):
        wait = throttle.wait()
        retry = [(b"retry-after", str(math.ceil(wait)).encode())] if wait is not None else []
        return await _json(send, 429, {"detail": "Too many requests."}, headers=retry)
    server = await database_sync_to_async(server_for)(who)
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=TRANSPORT,
        max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 4 * 1024 * 1024,
    )
    manager = server.session_manager
    async with manager.run():
        await manager.handle_request(scope, receive, send)


def _host_allowed(scope) -> bool:
    """The Host header (or X-Forwarded-Host when USE_X_FORWARDED_HOST) is one of
    ALLOWED_HOSTS, with Django's own rule and its DEBUG default."""
    headers = dict(scope.get("headers", []))
    raw = headers.get(b"host", b"")
    if settings.USE_X_FORWARDED_HOST and b"x-forwarded-host" in headers:
        raw = headers[b"x-forwarded-host"]
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _port = split_domain_port(raw.decode("latin1"))
    return bool(domain) and validate_host(domain, allowed)


async def _json(send, status: int, body: dict, headers=()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
