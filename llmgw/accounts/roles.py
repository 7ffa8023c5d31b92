"""Who may do what: four roles, each a Django group.

- viewer: reads everything an operator sees (the API's GETs, the console).
- operator: a viewer who also cordons and labels nodes, sets held counts,
  places replicas, and makes gateway keys for themselves, for named models.
- admin: an operator who also changes the catalog, makes all-model keys and
  sees and revokes everyone's keys. A superuser is an admin.
- prometheus: reads /metrics and nothing else, for a scraper's token.

viewer < operator < admin: a user's rank is their highest group. Logged in
with no role is allowed nothing, so an account made by hand (or a leaked
token of one) is inert until someone grants it a role.
"""

from __future__ import annotations

from typing import Any

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
PROMETHEUS = "prometheus"
ROLES = (VIEWER, OPERATOR, ADMIN, PROMETHEUS)
RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}

# The user object lives for one request; its groups are read once per
# request (one query), not once per check, and not at all for a token
# found in its web process's copy (llmgw.accounts.token_cache), which
# keeps them with the token.
_CACHE = "_llmgw_roles"


def groups(user: Any) -> frozenset[str]:
    """The names of `user`'s groups, read once per user object."""
    cached = getattr(user, _CACHE, None)
    if cached is None:
        cached = frozenset(user.groups.values_list("name", flat=True))
        setattr(user, _CACHE, cached)
    return cached


def remember(user: Any, names: frozenset[str]) -> None:
    """`user`'s groups, read with it: `groups` asks nothing more."""
    setattr(user, _CACHE, names)


def rank(user: Any) -> int:
    """0 for anonymous, inactive or roleless users."""
    if user is None or not user.is_authenticated or not user.is_active:
        return 0
    if user.is_superuser:
        return RANK[ADMIN]
    return max((RANK.get(name, 0) for name in groups(user)), default=0)


def is_viewer(user: Any) -> bool:
    return rank(user) >= RANK[VIEWER]


def is_operator(user: Any) -> bool:
    return rank(user) >= RANK[OPERATOR]


def is_admin(user: Any) -> bool:
    return rank(user) >= RANK[ADMIN]


def may_scrape(user: Any) -> bool:
    """/metrics: the prometheus role, or anyone who may read the console
    (the numbers are the same ones its pages show)."""
    if is_viewer(user):
        return True
    return bool(user is not None and user.is_authenticated and user.is_active) and (
        PROMETHEUS in groups(user)
    )


def grant(user: Any, role: str | None) -> None:
    """Give `user` exactly `role` (None: no role): the other roles' groups
    are left, so a demotion is a grant too."""
    from django.contrib.auth.models import Group
    from django.db import transaction

    if role is not None and role not in ROLES:
        raise ValueError(f"no role {role!r}; one of {', '.join(ROLES)}")
    with transaction.atomic():
        # Made by migration; made here too, should a flush (or a person)
        # have removed them since.
        groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
        user.groups.remove(*(g for name, g in groups.items() if name != role))
        if role is not None:
            user.groups.add(groups[role])
    if hasattr(user, _CACHE):
        delattr(user, _CACHE)
