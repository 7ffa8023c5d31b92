"""Create the first administrator and a CLI config for them.

The password is LLMGW_ADMIN_PASSWORD when given; otherwise a random one
printed once, here, and never stored in clear anywhere.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import yaml
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

from llmgw.accounts import roles


class Command(BaseCommand):
    help = "Create the admin account (once) and write a CLI config with its API token"

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--username", default=os.environ.get("LLMGW_ADMIN_USER", "admin"))
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--cli-config", type=Path, required=True)

    def handle(self, *args, username: str, url: str, cli_config: Path, **options) -> None:  # type: ignore[no-untyped-def]
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
            self.stdout.write(f"admin account {username!r} already exists")
        token, _ = Token.objects.get_or_create(user=user)
        cli_config.parent.mkdir(parents=True, exist_ok=True)
        cli_config.touch(mode=0o600)
        cli_config.write_text(yaml.safe_dump({"url": url, "token": token.key}))
        self.stdout.write(
            f"llmgw ctl config written to {cli_config} (export LLMGW_CONFIG={cli_config})"
        )
