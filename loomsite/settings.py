"""Loom settings. Everything that varies between machines comes from the environment;
see docs/configuration.md and loomsite/env.py."""

from datetime import timedelta
from pathlib import Path

from loomsite import env

# One checked read of the environment: a bad variable stops start-up here, by name.
loom_env = env.load()

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = loom_env.data_dir

SECRET_KEY = loom_env.secret_key
SECRET_KEY_IS_DEFAULT = loom_env.secret_key_is_default
DEBUG = loom_env.debug
ALLOWED_HOSTS = loom_env.allowed_hosts
CSRF_TRUSTED_ORIGINS = loom_env.csrf_trusted_origins

# Behind TLS (LOOM_HTTPS=1): redirect to https, HSTS, cookies only over https, and
# trust the proxy's X-Forwarded-Proto (the proxy must set it, overwriting the client's).
if loom_env.https:
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = loom_env.hsts_seconds
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy on every response (django-csp): only our own scripts and
# sockets; inline styles stay allowed for the admin's style attributes.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

INSTALLED_APPS = [
    "daphne",  # first, so runserver serves ASGI (WebSockets included)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Before channels: its `runworker` is teams' (heartbeat, survives a Redis restart).
    "teams",
    "channels",
    "csp",
    "axes",
    "ninja",  # the API docs' own static files (no CDN)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # An incoming W3C traceparent parents the work the request starts (with tracing on).
    "loomsite.tracing.TraceContextMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout response.
    "axes.middleware.AxesMiddleware",
]

# Failed logins (django-axes): five wrong passwords for one user from one address lock
# that pair out for 15 minutes, and LOOM_LOGIN_ADDRESS_FAILURES (20) from one address,
# whatever the usernames, lock the address out (loomsite.lockout); every failure is
# logged ("axes" logger) and kept in the admin's Axes tables. A successful login
# clears its own user's count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HANDLER = "loomsite.lockout.LoginLockout"
LOOM_LOGIN_ADDRESS_FAILURES = loom_env.login_address_failures
# The client's address behind LOOM_TRUSTED_PROXIES appending proxies (loomsite/client_ip).
LOOM_TRUSTED_PROXIES = loom_env.trusted_proxies
AXES_CLIENT_IP_CALLABLE = "loomsite.client_ip.client_ip"
# The audit log names who failed from where (never the password, which axes masks).
AXES_SENSITIVE_PARAMETERS: list[str] = []

ROOT_URLCONF = "loomsite.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = None
ASGI_APPLICATION = "loomsite.asgi.application"

DATABASES = {"default": loom_env.database}
if (
    DATABASES["default"]["ENGINE"].endswith("sqlite3")
    and DATABASES["default"]["NAME"] != ":memory:"
):
    env.private_sqlite_file(Path(DATABASES["default"]["NAME"]))

REDIS_URL = loom_env.redis_url
CHANNEL_LAYERS = {"default": loom_env.channel_layer}
# The API's rate limits live in the cache: shared through Redis when processes are
# several, in each process's memory otherwise.
if REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
LOOM_API_RATE = loom_env.api_rate

LOOM_OFFLINE_DELAY = loom_env.offline_delay
ANTHROPIC_API_KEY = loom_env.anthropic_api_key
ANTHROPIC_BASE_URL = loom_env.anthropic_base_url
# None when unset: the application picks Claude's default or the offline model per call.
LOOM_MODEL = loom_env.model
# Webhook deliveries (teams.engine.deliveries): timeout per attempt (seconds), the first
# retry's delay (seconds, doubled per retry, at most an hour), attempts before failing.
LOOM_WEBHOOK_TIMEOUT = loom_env.webhook_timeout
LOOM_WEBHOOK_BACKOFF = loom_env.webhook_backoff
LOOM_WEBHOOK_MAX_ATTEMPTS = loom_env.webhook_max_attempts
LOOM_WEBHOOK_CONCURRENCY = loom_env.webhook_concurrency
# The outbound guard (teams.lib.outbound): URLs people give may lead to private addresses.
LOOM_OUTBOUND_ALLOW_PRIVATE = loom_env.outbound_allow_private
# MCP servers (teams.engine.mcp_client): seconds a connection, listing or tool call may take.
LOOM_MCP_TIMEOUT = loom_env.mcp_timeout
# ... and whether HTTP servers are reached through the environment's proxy.
LOOM_MCP_USE_ENV_PROXY = loom_env.mcp_use_env_proxy
# Forks and replays (teams.history.fork_limits): their size and their rate per person.
LOOM_FORK_MAX_MESSAGES = loom_env.fork_max_messages
LOOM_FORK_RATE = loom_env.fork_rate
# run_command's sandbox (teams.files.sandbox): the longest a command may run (seconds),
# each process's address space (MB), commands one process runs at once, and folders
# shown read-only inside.
LOOM_SANDBOX_TIMEOUT = loom_env.sandbox_timeout
LOOM_SANDBOX_MEMORY_MB = loom_env.sandbox_memory_mb
LOOM_SANDBOX_CONCURRENCY = loom_env.sandbox_concurrency
LOOM_SANDBOX_PATHS = loom_env.sandbox_paths
# Turn leases and health (teams.run.turns, teams.observability.health): a running
# turn's lease in seconds (renewed by its worker's heartbeat every quarter lease), a
# model call's timeout, and the age of the oldest queued turn at which /healthz answers 503.
LOOM_TURN_LEASE = loom_env.turn_lease
LOOM_WORKER_THREADS = loom_env.worker_threads
LOOM_MODEL_TIMEOUT = loom_env.model_timeout
LOOM_HEALTH_MAX_QUEUE_AGE = loom_env.health_max_queue_age
# GET /metrics (Prometheus): a bearer token, or loopback clients only when unset.
LOOM_METRICS_TOKEN = loom_env.metrics_token

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in (
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    )
]
LOGIN_URL = "/admin/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Times with seconds (loomsite/formats/en/formats.py), ahead of the locale's.
FORMAT_MODULE_PATH = ["loomsite.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "loom": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # Failed and locked-out logins ("AXES: New login failure by {username, ip}").
        "axes": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # The MCP SDK logs each /mcp request at INFO (about 7 lines): its warnings only.
        "mcp": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
