"""Give a user one role (viewer, operator, admin, prometheus) or none."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from llmgw.accounts import roles


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    help = "Give USER exactly one role (viewer, operator, admin, prometheus), or none"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("role", choices=[*roles.ROLES, "none"])
        parser.add_argument(
            "--create",
            action="store_true",
            help="make the user first if missing, with no password (a token-only account, "
            "such as Prometheus's)",
        )

    def handle(self, *args: Any, username: str, role: str, create: bool, **options: Any) -> None:
        user = User.objects.filter(username=username).first()
        if user is None:
            if not create:
                raise CommandError(f"no user {username!r} (--create makes one)")
            user = User.objects.create_user(username)  # no password: it cannot log in
            self.stdout.write(f"user {username!r} created, with no password")
        if user.is_superuser and role != roles.ADMIN:
            self.stderr.write(f"{username!r} is a superuser: an admin whatever the role")
        try:
            roles.grant(user, None if role == "none" else role)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{username!r} now has role {role}")
