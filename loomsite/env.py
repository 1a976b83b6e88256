"""Loom's environment variables, read and checked by one pydantic-settings class.

`load()` reads the environment into a `LoomEnv`. A value that cannot be used stops
start-up with one ImproperlyConfigured that lists every bad variable by its name and
says what is wrong with it. settings.py turns the result into Django settings;
docs/configuration.md documents the variables.
"""

import os
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import SplitResult, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from pydantic import AfterValidator, BeforeValidator, Field, ValidationError
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from teams.lib.endpoints import shape_problem

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEV_SECRET_KEY = "loom-development-key-not-for-production"
DEFAULT_HOSTS = ("127.0.0.1", "localhost")

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}
POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql"}
REDIS_SCHEMES = {"redis", "rediss", "unix"}
# Error messages name these variables but never show their values: they hold secrets or
# may hold a password.
SECRET_VARIABLES = {"LOOM_SECRET_KEY", "ANTHROPIC_API_KEY", "LOOM_DATABASE_URL", "LOOM_REDIS_URL"}

# A connection is kept and reused by its thread (a turn worker's thread, a request's)
# for this many seconds, checked before its first use in each turn or request and
# replaced when it fails: opening one per turn cost a turn more CPU than its queries.
CONN_MAX_AGE = 600

SQLITE_OPTIONS = {
    # IMMEDIATE takes the write lock at BEGIN, so two writers queue on the busy
    # timeout instead of failing with "database is locked" on lock upgrade.
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
        "PRAGMA cache_size=-32000; PRAGMA temp_store=MEMORY;"
    ),
}


# --- URLs to Django settings. Each raises ValueError saying what is wrong; the message
# --- reads after the variable's name ("LOOM_REDIS_URL has an unknown scheme ...").


def _split(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ValueError(f"is not a valid URL: {exc}") from None
    return parts


def parse_database_url(url: str) -> dict:
    """The Django DATABASES entry for a sqlite:// or postgres:// URL."""
    url = url.strip()
    if url == "sqlite://:memory:":
        return _sqlite(":memory:")
    parts = _split(url)
    if parts.scheme not in {"sqlite", *POSTGRES_SCHEMES}:
        raise ValueError(f"has an unknown scheme {parts.scheme!r} (use sqlite:// or postgres://)")
    # sqlite:///relative.db, sqlite:////absolute/path.db; dj-database-url would read a
    # bare sqlite:// as an in-memory database, which is more likely a mistake.
    if parts.scheme == "sqlite" and not parts.path[1:]:
        raise ValueError("is a sqlite URL without a file path (sqlite:///loom.sqlite3)")
    try:
        config: dict[str, Any] = dict(
            dj_database_url.parse(url, conn_max_age=CONN_MAX_AGE, conn_health_checks=True)
        )
    except ValueError as exc:
        raise ValueError(f"is not a valid URL: {exc}") from None
    if parts.scheme == "sqlite":
        return _sqlite(config["NAME"])
    if not config["NAME"]:
        raise ValueError(
            "is a postgres URL without a database name (postgres://user:pass@host:5432/db)"
        )
    # Query-string options (?sslmode=require) are in OPTIONS.
    config.setdefault("OPTIONS", {})
    config["PORT"] = str(config["PORT"])
    return config


def default_database(data_dir: Path) -> dict:
    return _sqlite(data_dir / "loom.sqlite3")


def _sqlite(path: str | Path) -> dict:
    # Tests use a file beside the database, not shared-cache memory: only a file
    # gives threads WAL and the busy timeout, as in production.
    test_name = None if path == ":memory:" else str(Path(path).with_name(f"test-{Path(path).name}"))
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": dict(SQLITE_OPTIONS),
        "CONN_MAX_AGE": CONN_MAX_AGE,
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"NAME": test_name},
    }


def redis_channel_layer(url: str | None) -> dict:
    """The CHANNEL_LAYERS default: in-memory when unset, channels-redis for a Redis URL."""
    if url is None:
        return {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    url = url.strip()
    parts = _split(url)
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError(
            f"has an unknown scheme {parts.scheme!r} (use redis://, rediss:// or unix://)"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError("is a redis URL without a host (redis://host:6379/0)")
    # redis-py 8 reads with a 5 s socket timeout, the same 5 s channels-redis blocks in
    # BZPOPMIN for: idle workers then die with "Timeout reading". Read longer than that.
    host = {"address": url, "socket_timeout": 30}
    return {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [host], "capacity": 1000, "expiry": 60},
    }


def parse_redis_url(value: str | None, name: str) -> dict:
    """redis_channel_layer() for a variable read outside LoomEnv, e.g. a test's own Redis URL."""
    try:
        return redis_channel_layer(value if value and value.strip() else None)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} {exc}.") from None


# --- Field validators.


def _unset_if_empty(value: Any) -> Any:
    """An empty variable counts as unset: the field keeps its default."""
    if isinstance(value, str) and not value.strip():
        raise PydanticUseDefault()
    return value


def _boolean(value: Any) -> Any:
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ValueError("is not a boolean (use 1/0, true/false, yes/no, on/off)")
    return value


def _hosts(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    hosts = [h.strip() for h in value.split(",") if h.strip()]
    if not hosts:
        raise ValueError("is set but lists no host")
    for host in hosts:
        if "/" in host or any(c.isspace() for c in host):
            raise ValueError(f"lists {host!r}, which is not a host name")
    return hosts


def _folders(value: Any) -> Any:
    """A ":"-separated list of absolute folders (LOOM_SANDBOX_PATHS)."""
    if not isinstance(value, str):
        return value
    folders = [f.strip() for f in value.split(":") if f.strip()]
    for folder in folders:
        if not folder.startswith("/"):
            raise ValueError(f"lists {folder!r}, which is not an absolute path")
    return folders


def _origins(value: Any) -> Any:
    """A comma list of scheme://host[:port] origins, as CSRF_TRUSTED_ORIGINS wants."""
    if not isinstance(value, str):
        return value
    origins = [o.strip() for o in value.split(",") if o.strip()]
    for origin in origins:
        parts = _split(origin)
        if parts.scheme not in {"http", "https"} or not parts.hostname or parts.path:
            raise ValueError(
                f"lists {origin!r}, which is not an origin (scheme://host[:port], no path)"
            )
    return origins


def _http_url(value: str) -> str:
    url = value.strip()
    parts = _split(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("is not an http(s) URL with a host")
    return url


def _model_id(value: str) -> str:
    model = value.strip()
    problem = shape_problem(model)
    if problem:  # the endpoint, its key and the price are checked by `serve`
        raise ValueError(problem)
    return model


def _accepted_by(parse):
    """Check a URL by building its Django setting (thrown away: a property builds it again)."""

    def check(value: str) -> str:
        parse(value)
        return value.strip()

    return AfterValidator(check)


EmptyIsUnset = BeforeValidator(_unset_if_empty)


class LoomEnv(BaseSettings):
    """Every environment variable Loom reads, typed, with its default."""

    # Exact names; defaults are trusted, only values read from the environment are checked.
    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", validate_default=False)

    data_dir: Annotated[Path, EmptyIsUnset] = Field(
        PROJECT_DIR / "data", validation_alias="LOOM_DATA_DIR"
    )
    database_url: Annotated[str | None, EmptyIsUnset, _accepted_by(parse_database_url)] = Field(
        None, validation_alias="LOOM_DATABASE_URL"
    )
    redis_url: Annotated[str | None, EmptyIsUnset, _accepted_by(redis_channel_layer)] = Field(
        None, validation_alias="LOOM_REDIS_URL"
    )
    secret_key: Annotated[str, EmptyIsUnset] = Field(
        DEV_SECRET_KEY, validation_alias="LOOM_SECRET_KEY"
    )
    # Strict: only the words _boolean knows, and "" for false, never a guess. Off
    # unless asked for: manage.py turns it on for a laptop with nothing configured.
    debug: Annotated[bool, BeforeValidator(_boolean)] = Field(
        False, strict=True, validation_alias="LOOM_DEBUG"
    )
    # Behind TLS (directly or through a proxy that sets X-Forwarded-Proto).
    https: Annotated[bool, BeforeValidator(_boolean)] = Field(
        False, strict=True, validation_alias="LOOM_HTTPS"
    )
    hsts_seconds: Annotated[int, EmptyIsUnset] = Field(
        31_536_000, ge=0, validation_alias="LOOM_HSTS_SECONDS"
    )
    csrf_trusted_origins: Annotated[list[str], NoDecode, BeforeValidator(_origins)] = Field(
        [], validation_alias="LOOM_CSRF_TRUSTED_ORIGINS"
    )
    # How many proxies in front of Loom append to X-Forwarded-For (login throttling
    # reads the client's address through them).
    trusted_proxies: Annotated[int, EmptyIsUnset] = Field(
        0, ge=0, le=5, validation_alias="LOOM_TRUSTED_PROXIES"
    )
    # Failed logins from one address, any usernames, within the 15-minute cool-off that
    # lock the address out (loomsite.lockout); one user's own limit stays 5.
    login_address_failures: Annotated[int, EmptyIsUnset] = Field(
        20, ge=5, le=1000, validation_alias="LOOM_LOGIN_ADDRESS_FAILURES"
    )
    # NoDecode: a comma list, not the JSON pydantic-settings expects for a list.
    allowed_hosts: Annotated[list[str], NoDecode, BeforeValidator(_hosts)] = Field(
        list(DEFAULT_HOSTS), validation_alias="LOOM_ALLOWED_HOSTS"
    )
    anthropic_api_key: Annotated[str | None, EmptyIsUnset] = Field(
        None, validation_alias="ANTHROPIC_API_KEY"
    )
    anthropic_base_url: Annotated[str | None, EmptyIsUnset, AfterValidator(_http_url)] = Field(
        None, validation_alias="ANTHROPIC_BASE_URL"
    )
    # The offline model's pace: each reply takes this long (a tool call half), so a
    # newcomer has time between the demo's turns to speak next, nudge or take a seat.
    offline_delay: Annotated[float, EmptyIsUnset] = Field(
        4.0, ge=0, le=60, validation_alias="LOOM_OFFLINE_DELAY"
    )
    # Requests one API token (or staff user) may make: count/period (s, min, hour, day).
    api_rate: Annotated[str, EmptyIsUnset] = Field(
        "600/min",
        pattern=r"^[1-9][0-9]{0,6}/(s|sec|m|min|h|hour|d|day)$",
        validation_alias="LOOM_API_RATE",
    )
    # Webhook deliveries: seconds an attempt may take, the first retry's delay (doubled
    # on each retry, at most an hour) and the attempts before a delivery fails.
    webhook_timeout: Annotated[float, EmptyIsUnset] = Field(
        5.0, ge=0.1, le=60, validation_alias="LOOM_WEBHOOK_TIMEOUT"
    )
    webhook_backoff: Annotated[float, EmptyIsUnset] = Field(
        10.0, ge=1, le=3600, validation_alias="LOOM_WEBHOOK_BACKOFF"
    )
    webhook_max_attempts: Annotated[int, EmptyIsUnset] = Field(
        8, ge=1, le=30, validation_alias="LOOM_WEBHOOK_MAX_ATTEMPTS"
    )
    # Deliveries one process sends at once (threads; each waits on its receiver).
    webhook_concurrency: Annotated[int, EmptyIsUnset] = Field(
        4, ge=1, le=32, validation_alias="LOOM_WEBHOOK_CONCURRENCY"
    )
    # The outbound guard (teams.lib.outbound): on, URLs people give (webhooks, consultants)
    # may lead to loopback, private, link-local and CGNAT addresses (an intranet; tests).
    outbound_allow_private: Annotated[bool, BeforeValidator(_boolean)] = Field(
        False, strict=True, validation_alias="LOOM_OUTBOUND_ALLOW_PRIVATE"
    )
    # MCP servers: seconds one connection, listing or tool call may take (then the
    # server is marked unhealthy and its connection restarted).
    mcp_timeout: Annotated[float, EmptyIsUnset] = Field(
        60.0, ge=0.1, le=3600, validation_alias="LOOM_MCP_TIMEOUT"
    )
    # run_command's sandbox (teams.files.sandbox): the most seconds a command may run,
    # the address space of each of its processes, commands one process runs at once,
    # and folders shown read-only inside (a Node toolchain, say).
    sandbox_timeout: Annotated[int, EmptyIsUnset] = Field(
        300, ge=1, le=3600, validation_alias="LOOM_SANDBOX_TIMEOUT"
    )
    sandbox_memory_mb: Annotated[int, EmptyIsUnset] = Field(
        1024, ge=64, le=65_536, validation_alias="LOOM_SANDBOX_MEMORY_MB"
    )
    sandbox_concurrency: Annotated[int, EmptyIsUnset] = Field(
        2, ge=1, le=64, validation_alias="LOOM_SANDBOX_CONCURRENCY"
    )
    sandbox_paths: Annotated[list[str], NoDecode, BeforeValidator(_folders)] = Field(
        [], validation_alias="LOOM_SANDBOX_PATHS"
    )
    # MCP servers over HTTP: on, their connections go through HTTP(S)_PROXY of the
    # environment (the proxy then resolves names: the guard cannot pin the address).
    mcp_use_env_proxy: Annotated[bool, BeforeValidator(_boolean)] = Field(
        False, strict=True, validation_alias="LOOM_MCP_USE_ENV_PROXY"
    )
    # Forks and replays (teams.history.fork_limits): the most messages one may hold (a
    # replay: its source's), and how many one person may make per period.
    fork_max_messages: Annotated[int, EmptyIsUnset] = Field(
        1000, ge=1, le=1_000_000, validation_alias="LOOM_FORK_MAX_MESSAGES"
    )
    fork_rate: Annotated[str, EmptyIsUnset] = Field(
        "20/hour",
        pattern=r"^[1-9][0-9]{0,6}/(s|sec|m|min|h|hour|d|day)$",
        validation_alias="LOOM_FORK_RATE",
    )
    # Turn leases: a running turn's lease lasts this many seconds and its worker renews
    # it every quarter of that (a heartbeat), so a dead worker's turn is re-queued by the
    # sweeper within about a lease while a slow model call keeps its turn.
    # Turns a worker process runs at once, each in its own thread: they mostly wait on
    # the model, so this (not the CPU count) bounds a worker's share of the teams.
    worker_threads: Annotated[int, EmptyIsUnset] = Field(
        32, ge=1, le=512, validation_alias="LOOM_WORKER_THREADS"
    )
    turn_lease: Annotated[float, EmptyIsUnset] = Field(
        20.0, ge=1, le=3600, validation_alias="LOOM_TURN_LEASE"
    )
    # Seconds a model call may take (each attempt; the client retries 429/5xx itself).
    model_timeout: Annotated[float, EmptyIsUnset] = Field(
        120.0, ge=1, le=3600, validation_alias="LOOM_MODEL_TIMEOUT"
    )
    # /healthz answers 503 once the oldest queued turn has waited this many seconds.
    health_max_queue_age: Annotated[float, EmptyIsUnset] = Field(
        60.0, ge=1, le=86_400, validation_alias="LOOM_HEALTH_MAX_QUEUE_AGE"
    )
    # GET /metrics: with a token, only `Authorization: Bearer <token>` is answered;
    # without one, only loopback clients are (teams.observability.metrics, loomsite.metrics).
    metrics_token: Annotated[str | None, EmptyIsUnset] = Field(
        None, min_length=16, validation_alias="LOOM_METRICS_TOKEN"
    )
    # None: the application picks the default model when it calls one.
    model: Annotated[str | None, EmptyIsUnset, AfterValidator(_model_id)] = Field(
        None, validation_alias="LOOM_MODEL"
    )

    @property
    def secret_key_is_default(self) -> bool:
        return self.secret_key == DEV_SECRET_KEY

    @property
    def database(self) -> dict:
        if self.database_url is None:
            return default_database(self.data_dir)
        return parse_database_url(self.database_url)

    @property
    def channel_layer(self) -> dict:
        return redis_channel_layer(self.redis_url)


def private_sqlite_file(path: Path) -> None:
    """Keep the database's folder (0700) and file (0600, and its -wal and -shm) for
    Loom's user alone: created so, and tightened when they exist and are Loom's user's
    (an older install's 0644 file included)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    for item, mode in [(path.parent, 0o700)] + [
        (path.with_name(path.name + suffix), 0o600) for suffix in ("", "-wal", "-shm")
    ]:
        try:
            if item.stat().st_uid == os.getuid() and item.stat().st_mode & 0o077:
                item.chmod(mode)
        except FileNotFoundError:
            pass


def load() -> LoomEnv:
    """Read the environment; raise ImproperlyConfigured naming every bad variable."""
    try:
        loaded = LoomEnv()
    except ValidationError as exc:
        raise ImproperlyConfigured(describe(exc)) from None
    if not loaded.debug and loaded.secret_key_is_default:
        raise ImproperlyConfigured(
            "LOOM_SECRET_KEY is not set and LOOM_DEBUG is off: Loom will not serve with the "
            "public development key. Set LOOM_SECRET_KEY (for example to the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`), or set "
            "LOOM_DEBUG=1 on a laptop."
        )
    return loaded


# Pydantic's own checks, in plain words; `value_error` is one of ours and says it itself.
PLAIN_WORDS = {
    "float_parsing": "is not a number",
    "greater_than_equal": "must be at least {ge:g}",
    "less_than_equal": "must be at most {le:g}",
}


def describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "the environment"
        value = error.get("input")
        if name in SECRET_VARIABLES or not isinstance(value, str):
            subject = name
        else:
            subject = f"{name}={value!r}"
        if error["type"] == "value_error":
            what = str(error["ctx"]["error"])
        elif error["type"] in PLAIN_WORDS:
            what = PLAIN_WORDS[error["type"]].format(**error.get("ctx", {}))
        else:
            what = f"is not valid: {error['msg']}"
        lines.append(f"{subject} {what}.")
    if len(lines) == 1:
        return lines[0]
    return "Loom cannot start; fix these environment variables:\n" + "\n".join(
        f"  {line}" for line in lines
    )
