"""The test suite's settings: the project's, with a key of its own.

DEBUG is off by default and the settings refuse the public development key then,
so the suite brings a key that is only ever used here."""

import os

os.environ.setdefault("LOOM_SECRET_KEY", "loom-test-suite-key-not-a-secret")

from loomsite.settings import *  # noqa: E402,F403

# A test database of this run's own, so runs side by side (two checkouts, a helper's
# run beside yours) never share one SQLite file.
_test = DATABASES["default"].get("TEST") or {}  # noqa: F405
if _test.get("NAME") and DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    _name = _test["NAME"]
    _test["NAME"] = f"{_name.removesuffix('.sqlite3')}-{os.getpid()}.sqlite3"
