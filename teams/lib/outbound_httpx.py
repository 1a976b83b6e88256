"""The outbound guard (teams.lib.outbound) for clients built on httpx 0.x and httpcore
1.x: a2a-sdk's client takes an `httpx.AsyncClient`, not the httpx2 one the vendor SDKs
and the webhook sender use. The same rule and the same pinning: the network backend
resolves the host itself, checks EVERY address (outbound.checked_addresses) and
connects to an address it checked, so a name that changes its answer meanwhile (DNS
rebinding) gains nothing; TLS SNI and the Host header stay the name. No redirects are
followed, the environment's proxies are not used (a proxy would resolve the name
itself), and an answer is read at most to `max_response_bytes`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import httpcore
import httpx

from teams.lib import outbound


class RefusedConnect(httpcore.ConnectError):
    """The guard refused the address: httpx turns it into its ConnectError; the reason
    stays on this one (see refusal_in)."""

    def __init__(self, reason: str):
        super().__init__(f"Refused: {reason}")
        self.reason = reason


def refusal_in(exc: BaseException | None) -> str:
    """The guard's reason if `exc` (or what caused it) is a refusal, else ""."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, RefusedConnect | outbound.Refused | outbound.RefusedConnect):
            return exc.reason
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return ""


class AsyncGuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolve (in a thread), check every address, connect to a checked one."""

    def __init__(self):
        self._anyio = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await outbound.connect_checked(
            httpcore,
            RefusedConnect,
            self._anyio,
            host,
            port,
            timeout,
            local_address,
            socket_options,
        )

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise RefusedConnect("Unix sockets are not used")

    async def sleep(self, seconds: float) -> None:
        await self._anyio.sleep(seconds)


class ResponseTooLarge(httpx.ReadError):
    """The answer went on past what Loom reads."""


class _Capped(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, cap: int):
        self._stream, self._cap = stream, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._cap:
                raise ResponseTooLarge(f"The answer was over {self._cap} bytes; Loom stopped.")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class AsyncGuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's async transport over the guarded backend, with no proxies from the
    environment and a cap on each answer's size."""

    def __init__(self, *, max_response_bytes: int, limits: httpx.Limits):
        super().__init__(trust_env=False, limits=limits)
        pool = self._pool
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=pool._ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=AsyncGuardedBackend(),
        )
        self.max_response_bytes = max_response_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        response.stream = _Capped(response.stream, self.max_response_bytes)
        return response


def async_client(
    *,
    timeout: float,
    max_response_bytes: int = outbound.DEFAULT_MAX_RESPONSE_BYTES,
    **options,
) -> httpx.AsyncClient:
    """An httpx (0.x) async client for URLs people gave: guarded connections, no
    redirects followed, no proxies from the environment, `timeout` per phase, answers
    cut off past `max_response_bytes`."""
    return httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        transport=AsyncGuardedTransport(
            max_response_bytes=max_response_bytes,
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
        ),
        **options,
    )
