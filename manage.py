#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
    if "LOOM_DEBUG" not in os.environ and "LOOM_SECRET_KEY" not in os.environ:
        # Nothing configured: a laptop (`make run`). DEBUG is on and the development
        # key allowed; `serve` says so. Production sets LOOM_SECRET_KEY, and DEBUG
        # stays off.
        os.environ["LOOM_DEBUG"] = "1"
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
