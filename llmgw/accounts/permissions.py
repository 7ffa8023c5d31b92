"""The roles as DRF permission classes. They read request.user only, so
they hold whichever authentication class put the user there (token,
session, or whatever replaces them).

IsViewer lets reads through and nothing else: a view guarded by it alone
cannot be written to by accident. Writes name IsOperator or IsAdmin.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from llmgw.accounts import roles


class IsViewer(BasePermission):  # type: ignore[misc]  # DRF ships no types
    message = "needs the viewer role (or operator, admin)"

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.method in SAFE_METHODS and roles.is_viewer(request.user)


class IsOperator(BasePermission):  # type: ignore[misc]  # DRF ships no types
    message = "needs the operator role (or admin)"

    def has_permission(self, request: Request, view: Any) -> bool:
        return roles.is_operator(request.user)


class IsAdmin(BasePermission):  # type: ignore[misc]  # DRF ships no types
    message = "needs the admin role"

    def has_permission(self, request: Request, view: Any) -> bool:
        return roles.is_admin(request.user)


class ActionRoles:
    """A viewset mixin: the permission for each action, by name. An action
    not named is a read for viewers (IsViewer refuses its writes), so a new
    write action is refused to everyone until it is given a role here."""

    action_roles: dict[str, type[BasePermission]] = {}

    def get_permissions(self) -> list[BasePermission]:
        return [self.action_roles.get(getattr(self, "action", None) or "", IsViewer)()]
