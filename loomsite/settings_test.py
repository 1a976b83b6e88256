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

# Passwords hashed with one PBKDF2 round: Django's default hashing (about a third of a
# second a password) made every user a fixture creates cost more than most tests. The
# hashes stay "pbkdf2_sha256$1$...", which the site in a child process (on the
# project's own settings, tests/live_site.py) verifies as any Django does, so a
# browser test still logs in with a fixture's password; a hash made with more rounds
# (loom_demo's admin, made in a child) still verifies here.
PASSWORD_HASHERS = ["loomsite.test_hashers.OneRoundPBKDF2PasswordHasher"]
