"""Loom settings. Everything that varies between machines comes from the environment;
see the README's configuration table."""

import os
from pathlib import Path

from loomsite import env

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("LOOM_DATA_DIR") or BASE_DIR / "data")

DEV_SECRET_KEY = "loom-development-key-not-for-production"
SECRET_KEY = os.environ.get("LOOM_SECRET_KEY") or DEV_SECRET_KEY
SECRET_KEY_IS_DEFAULT = SECRET_KEY == DEV_SECRET_KEY
DEBUG = env.parse_bool(os.environ.get("LOOM_DEBUG"), "LOOM_DEBUG", default=True)
ALLOWED_HOSTS = env.parse_hosts(
    os.environ.get("LOOM_ALLOWED_HOSTS"), "LOOM_ALLOWED_HOSTS", ["127.0.0.1", "localhost"]
)

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

DATABASES = {
    "default": env.parse_database_url(
        os.environ.get("LOOM_DATABASE_URL"), "LOOM_DATABASE_URL", DATA_DIR
    )
}
if (
    DATABASES["default"]["ENGINE"].endswith("sqlite3")
    and DATABASES["default"]["NAME"] != ":memory:"
):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)

REDIS_URL = os.environ.get("LOOM_REDIS_URL") or None
CHANNEL_LAYERS = {"default": env.parse_redis_url(REDIS_URL, "LOOM_REDIS_URL")}

LOOM_OFFLINE_DELAY = env.parse_seconds(
    os.environ.get("LOOM_OFFLINE_DELAY"), "LOOM_OFFLINE_DELAY", default=1.0
)
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY") or None
ANTHROPIC_BASE_URL = env.parse_url(os.environ.get("ANTHROPIC_BASE_URL"), "ANTHROPIC_BASE_URL")
LOOM_MODEL = env.parse_model(os.environ.get("LOOM_MODEL"), "LOOM_MODEL", "claude-sonnet-4-6")

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
