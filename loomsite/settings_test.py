"""The test suite's settings: the project's, with a key of its own.

DEBUG is off by default and the settings refuse the public development key then,
so the suite brings a key that is only ever used here."""

import os

os.environ.setdefault("LOOM_SECRET_KEY", "loom-test-suite-key-not-a-secret")

from loomsite.settings import *  # noqa: E402,F403
