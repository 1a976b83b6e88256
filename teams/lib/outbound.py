"""The outbound guard: every request Loom makes to a URL a person gave (webhooks,
consultants' base URLs; later HTTP MCP servers) goes through here, so that such a
URL cannot reach Loom's own host, its private network or the cloud metadata address
(server-side request forgery).

Two checks, one rule (`address_problem`):

- when the URL is saved, `check_url` (or the Django validator `validate_url`): http or
  https, a usable host and port, and every address the host resolves to public. A
  name that does not resolve now is accepted (the receiver may not be up yet) and
  checked when it is used.
- when a request is sent, `client()` (an httpx2 client: both vendor SDKs and the
  webhook sender use httpx2): its network backend resolves the host itself, checks
  EVERY address, and connects to the address it checked: no second lookup, so a name
  that changes its answer between the check and the connection (DNS rebinding) gains
  nothing. TLS SNI and the Host header stay the name. Redirects are not followed; the
  environment's proxies are not used (a proxy would resolve the name itself).

Refused: loopback, private (RFC 1918, IPv6 unique local), link-local (169.254/16, the
metadata address among them), shared CGNAT space (100.64/10), multicast, reserved,
unspecified, and whatever else is not a global address, in IPv4 and IPv6 (IPv4-mapped
and the IPv6 forms that carry an IPv4 address checked as that address), numeric forms
such as 2130706433, 0x7f000001, 017700000001 or 127.1 included.
LOOM_OUTBOUND_ALLOW_PRIVATE=1 lifts it (an intranet's receivers, the test suite),
except for multicast, unspecified and reserved addresses and the cloud metadata
addresses, which are never a receiver.

The client also ends a request at a deadline for the whole request (`deadline`, or
`total_timeout`), not per phase, and stops reading an answer past `max_response_bytes`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import httpcore2
import httpx2
from django.conf import settings
from django.core.exceptions import ValidationError

SCHEMES = ("http", "https")
LOOKUP_THREADS = 8  # name lookups run here, so a deadline can stop waiting for one
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
LIMITS = httpx2.Limits(max_connections=20, max_keepalive_connections=5)
METADATA = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
}
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
NUMERIC_ISH = re.compile(r"^(0x[0-9a-f]*|[0-9])[0-9a-fx.]*$")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """The URL or the address it leads to is not one Loom sends to; `reason` says why
    in words a person can act on. Never worth retrying."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def allow_private() -> bool:
    return bool(getattr(settings, "LOOM_OUTBOUND_ALLOW_PRIVATE", False))


# --- addresses --------------------------------------------------------------------


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64, Teredo client)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in net for net in NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def address_kind(ip: IPAddress) -> str:
    """What kind of address `ip` is when Loom may not connect to it ("a private
    address", ...); "" when it may."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "an address of a network interface (an IPv6 zone)"
        inner = _embedded_ipv4(ip)
        if inner is not None:
            kind = address_kind(inner)
            return f"an IPv6 form of {inner}, {kind}" if kind else ""
    if ip in METADATA:
        return "the cloud metadata address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    private = allow_private()
    if ip.is_loopback:
        return "" if private else "a loopback address (this host)"
    if ip.is_link_local:
        return "" if private else "a link-local address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in CGNAT:
        return "" if private else "a shared (CGNAT) address"
    if ip.is_reserved:
        return "a reserved address"
    if ip.is_private or getattr(ip, "is_site_local", False):
        return "" if private else "a private address"
    if not ip.is_global:
        return "" if private else "not a public address"
    return ""


def address_problem(ip: IPAddress) -> str:
    """Why Loom may not connect to `ip` ("" when it may)."""
    kind = address_kind(ip)
    if not kind:
        return ""
    return f"{ip} is {kind}"


def ip_literal(host: str) -> IPAddress | None:
    """The address `host` spells, in any form the C library reads as one (dotted,
    a single number, hex or octal parts, fewer than four parts), or None for a name."""
    host = host.strip("[]").lower()
    try:
        return ipaddress.ip_address(host.replace("%25", "%"))
    except ValueError:
        pass
    if NUMERIC_ISH.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (the system resolver). The one lookup the
    guard makes; the test suite replaces it."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in found:
            found.append(address)
    return found


_lookups = ThreadPoolExecutor(LOOKUP_THREADS, thread_name_prefix="loom-outbound-dns")


def _lookup(host: str, port: int, timeout: float | None) -> list[str]:
    future = _lookups.submit(resolve, host, port)
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        raise httpcore2.ConnectTimeout(f"Looking up {host} took over {timeout:g} s") from None


def checked_addresses(host: str, port: int, *, timeout: float | None = None) -> list[IPAddress]:
    """Every address `host` stands for, each checked: Refused when any is refused (a
    name that also leads somewhere private is not used at all). OSError (socket.gaierror)
    when the name does not resolve."""
    literal = ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        found = _lookup(host, port, timeout)
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} resolves to no address")
    for ip in addresses:
        kind = address_kind(ip)
        if kind and literal is None:
            raise Refused(f"{host} resolves to {ip}, {kind}")
        if kind:
            spelled = host.strip("[]")
            named = f"{spelled} ({ip})" if spelled != str(ip) else str(ip)
            raise Refused(f"{named} is {kind}")
    return addresses


# --- URLs -----------------------------------------------------------------------


def parse(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL Loom could send to, or Refused saying what is
    wrong with it: http or https only, a host that is a usable name or address, a port
    from 1 to 65535, no user name or password in it."""
    if not isinstance(url, str) or not url.strip():
        raise Refused("the URL is empty")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise Refused("the URL contains spaces or control characters")
    try:
        parsed = httpx2.URL(url)
        port = parsed.port
    except (httpx2.InvalidURL, ValueError, UnicodeError) as exc:
        raise Refused(f"the URL cannot be used: {exc}") from None
    if parsed.scheme not in SCHEMES:
        raise Refused("only http:// and https:// URLs are used")
    if parsed.userinfo:
        raise Refused("the URL may not contain a user name or password")
    host = parsed.raw_host.decode("ascii", "replace").lower()
    if not host:
        raise Refused("the URL has no host")
    if port is not None and not 0 < port < 65536:
        raise Refused(f"port {port} cannot be used (1 to 65535)")
    port = port or (443 if parsed.scheme == "https" else 80)
    if ip_literal(host) is None:
        name = host.removesuffix(".")
        if ":" in host or "%" in host:
            raise Refused(f"{host} is not a usable IP address")
        if len(name) > 253 or not all(LABEL.match(label) for label in name.split(".")):
            raise Refused(f"{host[:80]} is not a usable host name")
    return parsed.scheme, host, port


def check_url(url: str, *, resolve_names: bool = True) -> None:
    """Refused unless `url` is one Loom may send to now. A name that does not resolve
    passes (checked again when used); one that resolves anywhere refused does not."""
    _, host, port = parse(url)
    if not resolve_names and ip_literal(host) is None:
        return
    try:
        checked_addresses(host, port, timeout=5)
    except (OSError, httpcore2.ConnectTimeout):
        return  # not resolvable now: the send checks it again


def validate_url(value: str) -> None:
    """A Django validator: the URL's problem as a ValidationError."""
    try:
        check_url(value)
    except Refused as exc:
        raise ValidationError(f"This URL is not used: {exc.reason}.") from None


def refusal_in(exc: BaseException | None) -> str:
    """The guard's reason if `exc` (or what caused it) is a refusal, else ""."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, Refused):
            return exc.reason
        if isinstance(exc, RefusedConnect):
            return exc.reason
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return ""


# --- sending: the deadline ------------------------------------------------------------

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "loom_outbound_deadline", default=None
)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every guarded request made inside ends by `seconds` from now, all phases (and
    the SDK's own retries) together."""
    at = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(at if outer is None else min(at, outer))
    try:
        yield
    finally:
        _deadline.reset(token)


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    """The phase's timeout, cut to what is left of the request's deadline."""
    at = _deadline.get()
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("The request's deadline passed")
    return left if timeout is None else min(timeout, left)


class RefusedConnect(httpcore2.ConnectError):
    """The guard refused the address: httpx2 turns it into its ConnectError; the
    reason stays on this one (see refusal_in)."""

    def __init__(self, reason: str):
        super().__init__(f"Refused: {reason}")
        self.reason = reason


class _Stream(httpcore2.NetworkStream):
    """A connection whose reads and writes end at the request's deadline."""

    def __init__(self, stream: httpcore2.NetworkStream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        timeout = _bounded(timeout, httpcore2.ConnectTimeout)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class GuardedBackend(httpcore2.NetworkBackend):
    """Resolve, check every address, connect to a checked one: the host is never
    looked up again by anything else."""

    def __init__(self):
        self._sync = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable | None = None,
    ) -> httpcore2.NetworkStream:
        timeout = _bounded(timeout, httpcore2.ConnectTimeout)
        try:
            addresses = checked_addresses(host, port, timeout=timeout)
        except Refused as exc:
            raise RefusedConnect(exc.reason) from None
        except OSError as exc:
            raise httpcore2.ConnectError(f"Could not resolve {host}: {exc}") from exc
        last: Exception | None = None
        for ip in addresses:
            try:
                stream = self._sync.connect_tcp(
                    str(ip),
                    port,
                    timeout=_bounded(timeout, httpcore2.ConnectTimeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore2.ConnectError as exc:
                last = exc
                continue
            return _Stream(stream)
        raise last or httpcore2.ConnectError(f"Could not connect to {host}")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise RefusedConnect("Unix sockets are not used")

    def sleep(self, seconds: float) -> None:
        self._sync.sleep(seconds)


# --- sending: the client --------------------------------------------------------------


class ResponseTooLarge(httpx2.ReadError):
    """The answer went on past what Loom reads."""


class _Capped(httpx2.SyncByteStream):
    """The answer's body, read within the request's deadline and cut off past `cap`."""

    def __init__(self, stream, cap: int, at: float | None):
        self._stream, self._cap, self._at = stream, cap, at

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._stream)
        seen = 0
        while True:
            token = _deadline.set(self._at) if self._at is not None else None
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            finally:
                if token is not None:
                    _deadline.reset(token)
            seen += len(chunk)
            if seen > self._cap:
                raise ResponseTooLarge(f"The answer was over {self._cap} bytes; Loom stopped.")
            yield chunk

    def close(self) -> None:
        self._stream.close()


@functools.cache
def tls_context(*, trust_env: bool = False) -> ssl.SSLContext:
    """The TLS settings this process's clients verify servers with (httpx2's default:
    certifi's CA bundle; SSL_CERT_FILE and SSL_CERT_DIR too where `trust_env`), made
    once: httpx2 makes one per client otherwise, about 20 ms of CPU loading the bundle,
    and a client is made for every endpoint's settings, delivery and MCP connection."""
    return httpx2.create_ssl_context(trust_env=trust_env)


class GuardedTransport(httpx2.HTTPTransport):
    """httpx2's transport over the guarded backend: no proxies from the environment,
    a whole-request deadline and a cap on the answer's size."""

    def __init__(
        self,
        *,
        total_timeout: float | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        verify=True,
        limits: httpx2.Limits = LIMITS,
    ):
        verify = tls_context() if verify is True else verify
        super().__init__(verify=verify, trust_env=False, limits=limits)
        pool = self._pool
        self._pool = httpcore2.ConnectionPool(
            ssl_context=pool._ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(),
        )
        pool.close()
        self.total_timeout = total_timeout
        self.max_response_bytes = max_response_bytes

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        at = _deadline.get()
        if self.total_timeout is not None:
            own = time.monotonic() + self.total_timeout
            at = own if at is None else min(at, own)
        token = _deadline.set(at)
        try:
            response = super().handle_request(request)
        finally:
            _deadline.reset(token)
        response.stream = _Capped(response.stream, self.max_response_bytes, at)
        return response


def client(
    *,
    timeout: float,
    total_timeout: float | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    **options,
) -> httpx2.Client:
    """An httpx2 client for URLs people gave: guarded connections, no redirects
    followed, no proxies from the environment; `timeout` per phase, `total_timeout`
    (default: `timeout`) for the whole request, answers cut off past
    `max_response_bytes`. Pass it to an SDK as `http_client`."""
    return httpx2.Client(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        transport=GuardedTransport(
            total_timeout=timeout if total_timeout is None else total_timeout,
            max_response_bytes=max_response_bytes,
        ),
        **options,
    )


# --- sending, async: the MCP client's connections ------------------------------------


class AsyncGuardedBackend(httpcore2.AsyncNetworkBackend):
    """GuardedBackend for async clients: resolve (in a thread), check every address,
    connect to a checked one. TLS still names the host (SNI, certificate)."""

    def __init__(self):
        self._anyio = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return await connect_checked(
            httpcore2,
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


async def connect_checked(core, refused, anyio, host, port, timeout, local_address, socket_options):
    """An async guarded backend's connection: the name resolved (in a thread) and each
    address checked, then a connection to a checked one, never to the name again.
    `core` is the httpcore the backend's pool speaks (httpcore2 for httpx2, httpcore
    for httpx, which a2a-sdk uses), whose errors the pool expects; `refused` its
    RefusedConnect."""
    try:
        addresses = await asyncio.to_thread(checked_addresses, host, port, timeout=timeout)
    except Refused as exc:
        raise refused(exc.reason) from None
    except httpcore2.ConnectTimeout as exc:  # the lookup's own deadline
        raise core.ConnectTimeout(str(exc)) from None
    except OSError as exc:
        raise core.ConnectError(f"Could not resolve {host}: {exc}") from exc
    last: Exception | None = None
    for ip in addresses:
        try:
            return await anyio.connect_tcp(
                str(ip),
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )
        except core.ConnectError as exc:
            last = exc
    raise last or core.ConnectError(f"Could not connect to {host}")


class AsyncGuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's async transport over the guarded backend, with no proxies from the
    environment (a proxy would resolve the name itself)."""

    def __init__(self, *, verify=True, limits: httpx2.Limits = LIMITS):
        verify = tls_context() if verify is True else verify
        super().__init__(verify=verify, trust_env=False, limits=limits)
        pool = self._pool
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=pool._ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=AsyncGuardedBackend(),
        )


def async_client(*, timeout: httpx2.Timeout | float, **options) -> httpx2.AsyncClient:
    """An async httpx2 client for URLs people gave: every connection to an address the
    guard checked in that same lookup (no DNS rebinding), no redirects followed, no
    proxies from the environment."""
    return httpx2.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        transport=AsyncGuardedTransport(),
        **options,
    )
