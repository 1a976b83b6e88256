"""The settings of a site or command a test starts in a child process
(tests/live_site.py): the project's own, with the suite's one-round password hasher.

On the project's hasher a login to the site upgrades the fixture's one-round hash to
Django's million rounds and saves it: about half a second of the child's CPU for
every browser test that logs in, and as much for loom_demo's admin password."""

from loomsite.settings import *  # noqa: F403 - the site as it is, but for the hasher

PASSWORD_HASHERS = ["loomsite.test_hashers.OneRoundPBKDF2PasswordHasher"]
