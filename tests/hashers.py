"""The password hasher the suite uses: Django's PBKDF2 with fewer rounds.

A password hashed at Django's 870,000 rounds costs 0.2 s of CPU, and the
suite makes a user with a password in hundreds of tests. These hashes are
pbkdf2_sha256 like production's and carry their round count, so a server
the tests start with the production settings checks them as it checks any
other. No test here measures the hash's cost."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FewRoundsPBKDF2(PBKDF2PasswordHasher):
    iterations = 1_000
