"""Parsing of Loom's environment variables.

Every function takes the raw value and the variable's name, and raises
ImproperlyConfigured naming the variable when the value cannot be used, so a bad
setting stops start-up with a message that says what to fix.
"""

from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}

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


def parse_bool(value: str | None, name: str, default: bool = False) -> bool:
    if value is None:
        return default
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no).")


def parse_hosts(value: str | None, name: str, default: list[str]) -> list[str]:
    if value is None:
        return default
    hosts = [h.strip() for h in value.split(",") if h.strip()]
    if not hosts:
        raise ImproperlyConfigured(f"{name} is set but lists no host.")
    for host in hosts:
        if " " in host or "/" in host:
            raise ImproperlyConfigured(f"{name}: {host!r} is not a host name.")
    return hosts


def parse_database_url(value: str | None, name: str, data_dir: Path) -> dict:
    """Return a Django DATABASES entry for a URL, or the SQLite default when unset."""
    if value is None or not value.strip():
        return _sqlite(data_dir / "loom.sqlite3")
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not a valid URL: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        # sqlite:///relative.db, sqlite:////absolute/path.db, sqlite://:memory:
        path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if parts.netloc == ":memory:" or path == ":memory:":
            return _sqlite(":memory:")
        if not path:
            raise ImproperlyConfigured(f"{name}: a sqlite URL needs a file path.")
        return _sqlite(Path(path))
    if scheme in {"postgres", "postgresql", "pgsql"}:
        db_name = unquote(parts.path.lstrip("/"))
        if not db_name:
            raise ImproperlyConfigured(f"{name}: a postgres URL needs a database name.")
        options = dict(parse_qsl(parts.query))
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": db_name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 0,
            "CONN_HEALTH_CHECKS": True,
        }
    raise ImproperlyConfigured(
        f"{name} has an unknown scheme {parts.scheme!r} (use sqlite:// or postgres://)."
    )


def _sqlite(path) -> dict:
    # Tests use a file beside the database, not shared-cache memory: only a file
    # gives threads WAL and the busy timeout, as in production.
    test_name = None if path == ":memory:" else str(Path(path).with_name(f"test-{Path(path).name}"))
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": dict(SQLITE_OPTIONS),
        "TEST": {"NAME": test_name},
    }


def parse_redis_url(value: str | None, name: str) -> dict:
    """Return the CHANNEL_LAYERS default: in-memory when unset, channels-redis when set."""
    if value is None or not value.strip():
        return {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not a valid URL: {exc}") from exc
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"{name} has an unknown scheme {parts.scheme!r} (use redis:// or rediss://)."
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ImproperlyConfigured(f"{name}: a redis URL needs a host.")
    # redis-py 8 reads with a 5 s socket timeout, the same 5 s channels-redis blocks in
    # BZPOPMIN for: idle workers then die with "Timeout reading". Read longer than that.
    host = {"address": value.strip(), "socket_timeout": 30}
    return {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [host], "capacity": 1000, "expiry": 60},
    }


def parse_url(value: str | None, name: str) -> str | None:
    if value is None or not value.strip():
        return None
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not a valid URL: {exc}") from exc
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ImproperlyConfigured(f"{name} must be an http(s) URL, got {value!r}.")
    return value.strip()


def parse_model(value: str | None, name: str, default: str) -> str:
    if value is None or not value.strip():
        return default
    model = value.strip()
    if any(c.isspace() for c in model) or len(model) > 100:
        raise ImproperlyConfigured(f"{name}={value!r} is not a model id.")
    return model


def parse_seconds(value: str | None, name: str, default: float) -> float:
    if value is None or not value.strip():
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number of seconds.") from None
    if not 0 <= seconds <= 60:
        raise ImproperlyConfigured(f"{name}={value!r} must be between 0 and 60 seconds.")
    return seconds
