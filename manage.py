#!/usr/bin/env python
import os
import sys

# Set any of these and manage.py no longer assumes a laptop.
PRODUCTION_HINTS = (
    "LOOM_DEBUG",
    "LOOM_SECRET_KEY",
    "LOOM_HTTPS",
    "LOOM_ALLOWED_HOSTS",
    "LOOM_CSRF_TRUSTED_ORIGINS",
    "LOOM_DATABASE_URL",
    "LOOM_REDIS_URL",
)


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
    if not any(name in os.environ for name in PRODUCTION_HINTS):
        # Nothing configured: a laptop (`make run`). DEBUG is on and the development
        # key allowed; `serve` says so. Any production variable turns this off, so a
        # half-configured server refuses to start without LOOM_SECRET_KEY instead.
        os.environ["LOOM_DEBUG"] = "1"
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
