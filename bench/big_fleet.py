"""A 5,000-node fleet in PostgreSQL for the benchmarks of what operators
read (bench/ctl.py, the cluster page in bench/console.py): the rows of
tests/bulk_fleet.py, the example catalog, one placement attempt recorded
for explain, and a user with an API token. Empties the database's fleet
and catalog first: give it a database of its own (DATABASE_URL)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

USER, PASSWORD = "bench", "bench-surfaces-password"
# Held and placed once (its record is what explain reads), and never
# placed (explain then runs placement dry, over every node).
RECORDED, DRY = "qwen2.5-7b-instruct", "deepseek-r1-671b-cpu"


def build(count: int) -> str:
    """The fleet; returns an operator's API token."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("set DATABASE_URL to a PostgreSQL database of the benchmark's own")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection

    from llmgw.accounts import roles
    from llmgw.accounts.tokens import create_token
    from llmgw.catalog import services as catalog
    from llmgw.catalog.models import Model
    from llmgw.inventory.models import Node
    from llmgw.serving import placing
    from tests import bulk_fleet

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        # Every table that holds a node's or a model's rows goes with it
        # (replicas, claims, placement records).
        tables = ", ".join(m._meta.db_table for m in (Node, Model))
        cursor.execute(f"TRUNCATE {tables} CASCADE")
    catalog.apply_text((ROOT / "deploy" / "server.example.yaml").read_text())
    bulk_fleet.build(count)
    placing.place_replica(RECORDED)
    user = User.objects.filter(username=USER).first()
    if user is None:
        user = User.objects.create_user(USER, password=PASSWORD)
    roles.grant(user, roles.OPERATOR)
    return create_token(user, "bench", 1).secret
