"""The test suite's password hasher (loomsite/settings_test.py names it): PBKDF2 with
one round. Never in the project's own settings."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneRoundPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
