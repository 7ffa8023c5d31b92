"""Create the first administrator and a CLI config for them.

The password is LLMGW_ADMIN_PASSWORD when given; otherwise a random one
printed once, here, and never stored in clear anywhere.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from llmgw.accounts import roles, tokens
from llmgw.private import write_private


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    help = "Create the admin account (once) and write a CLI config with its API token"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default=os.environ.get("LLMGW_ADMIN_USER", "admin"))
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--cli-config", type=Path, required=True)

    def handle(self, *args: Any, username: str, url: str, cli_config: Path, **options: Any) -> None:
        user = User.objects.filter(username=username).first()
        if user is None:
            given = os.environ.get("LLMGW_ADMIN_PASSWORD")
            password = given or secrets.token_urlsafe(12)
            user = User.objects.create_superuser(username, password=password)
            # A superuser is an admin anyway; the group says so where
            # people look (Admin > Users, `grant_role`).
            roles.grant(user, roles.ADMIN)
            if given:
                self.stdout.write(f"admin account {username!r} created with LLMGW_ADMIN_PASSWORD")
            else:
                self.stdout.write(
                    f"admin account {username!r} created; one-time password: {password}"
                )
                self.stdout.write("  (shown once: change it under Admin > Users)")
        else:
            # Run again (make demo a second time), the password is not
            # shown: it was shown once and is stored only hashed. Say how to
            # get in anyway, or the operator is locked out of their own demo.
            given = os.environ.get("LLMGW_ADMIN_PASSWORD")
            how = (
                "log in with LLMGW_ADMIN_PASSWORD"
                if given and user.check_password(given)
                else "its password was shown once, when it was made"
            )
            self.stdout.write(
                f"admin account {username!r} already exists: {how}; to set a new one: "
                f"python manage.py changepassword {username}"
            )
        secret = _still_good(cli_config, user)
        if secret is None:
            secret = tokens.create_token(user, "bootstrap_admin").secret
        # A new 0600 file takes the name, whatever mode an older one had.
        cli_config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(cli_config, yaml.safe_dump({"url": url, "token": secret}))
        self.stdout.write(
            f"llmgw ctl config written to {cli_config} (export LLMGW_CONFIG={cli_config})"
        )


def _still_good(cli_config: Path, user: User) -> str | None:
    """The token `cli_config` holds, if it is this user's and has a week to
    live: the demo restarting keeps its token (and Prometheus's copy of it)
    instead of making another each time."""
    try:
        secret = str(yaml.safe_load(cli_config.read_text())["token"])
        token = tokens.authenticate(secret)
    except (OSError, yaml.YAMLError, TypeError, KeyError, tokens.TokenRefused):
        return None
    if token.user_id != user.pk or token.expires_at < timezone.now() + timedelta(days=7):
        return None
    return secret
