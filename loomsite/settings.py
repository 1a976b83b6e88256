"""Loom settings. Everything that varies between machines comes from the environment;
see the README's configuration table and loomsite/env.py."""

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

INSTALLED_APPS = [
    "daphne",  # first, so runserver serves ASGI (WebSockets included)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "teams",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)

REDIS_URL = loom_env.redis_url
CHANNEL_LAYERS = {"default": loom_env.channel_layer}

LOOM_OFFLINE_DELAY = loom_env.offline_delay
ANTHROPIC_API_KEY = loom_env.anthropic_api_key
ANTHROPIC_BASE_URL = loom_env.anthropic_base_url
# None when unset: the application picks Claude's default or the offline model per call.
LOOM_MODEL = loom_env.model

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/admin/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
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
    "loggers": {"loom": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
