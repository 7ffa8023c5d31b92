"""Make an API token for a user and print it, once: only its digest is kept."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from llmgw.accounts import tokens


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    help = "Make an API token for USER and print it (shown once)"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="to tell the user's tokens apart")
        parser.add_argument(
            "--days",
            type=int,
            default=settings.API_TOKEN_TTL_DAYS,
            help="days until it expires (default: LLMGW_API_TOKEN_TTL_DAYS)",
        )

    def handle(self, *args: Any, username: str, name: str, days: int, **options: Any) -> None:
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is disabled: its tokens would be refused")
        if days < 1:
            raise CommandError("--days: at least 1")
        created = tokens.create_token(user, name, days)
        self.stderr.write(
            f"token {name!r} for {username}, expires {created.token.expires_at:%Y-%m-%d} "
            "(shown once; store it now):"
        )
        self.stdout.write(created.secret)
