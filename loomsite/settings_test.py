"""The test suite's settings: the project's, with a key of its own.

DEBUG is off by default and the settings refuse the public development key then,
so the suite brings a key that is only ever used here."""

import os

os.environ.setdefault("LOOM_SECRET_KEY", "loom-test-suite-key-not-a-secret")

from loomsite.settings import *  # noqa: E402,F403

# A test database of this run's own, so runs side by side (two checkouts, a helper's
# run beside yours, make test's two runs) never share one SQLite file or PostgreSQL
# database. pytest-xdist's workers are processes of their own (and pytest-django adds
# "_gw<n>" besides). PostgreSQL's would otherwise be "test_<name>" for every run.
_default = DATABASES["default"]  # noqa: F405
_test = _default.setdefault("TEST", {})
if _test.get("NAME") and _default["ENGINE"].endswith("sqlite3"):
    _name = _test["NAME"]
    _test["NAME"] = f"{_name.removesuffix('.sqlite3')}-{os.getpid()}.sqlite3"
elif _default["ENGINE"].endswith("postgresql"):
    _test["NAME"] = f"test_{_default['NAME']}_{os.getpid()}"

# Passwords hashed with one PBKDF2 round: Django's default hashing (about a third of a
# second a password) made every user a fixture creates cost more than most tests. The
# hashes stay "pbkdf2_sha256$1$...", which any Django verifies; a site or command a
# test starts in a child process hashes so too (tests/fakes/site_settings.py), and a
# hash made with more rounds still verifies here.
PASSWORD_HASHERS = ["loomsite.test_hashers.OneRoundPBKDF2PasswordHasher"]
