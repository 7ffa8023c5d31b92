"""Credentials: API tokens kept as digests, with an expiry, shown once;
password guessing throttled; every secret file 0600 from the moment it
exists."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tests.tokens import make_token

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "a-long-test-password"


@pytest.fixture(autouse=True)
def no_failed_logins() -> Any:
    """Failed-login counters, per address: the test client is always
    127.0.0.1, so none may leak into the next test, here or elsewhere."""
    cache.clear()
    yield
    cache.clear()


def every_stored_value() -> str:
    """Every row of every table, as text: a secret found here is stored."""
    out = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            out.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(out)


def token_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


# -- tokens stored hashed, shown once, with an expiry ----------------------


@pytest.mark.django_db
def test_the_token_endpoint_answers_a_secret_the_database_does_not_keep(operator):
    first = APIClient().post(
        "/api/v1/token", {"username": "ops", "password": PASSWORD}, format="json"
    )
    assert first.status_code == 200, first.content
    token = first.json()["token"]
    assert token not in every_stored_value()
    assert first.json()["expires_at"]
    assert token_client(token).get("/api/v1/nodes").status_code == 200
    # Shown once: asking again makes another token, never repeats the first.
    second = APIClient().post(
        "/api/v1/token", {"username": "ops", "password": PASSWORD}, format="json"
    )
    assert second.json()["token"] != token
    assert token_client(second.json()["token"]).get("/api/v1/nodes").status_code == 200
    assert token_client(token + "x").get("/api/v1/nodes").status_code == 401


@pytest.mark.django_db
def test_an_expired_token_or_a_disabled_user_is_refused(operator):
    from llmgw.accounts.models import ApiToken

    token = make_token(operator)
    assert token_client(token).get("/api/v1/nodes").status_code == 200
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = token_client(token).get("/api/v1/nodes")
    assert answer.status_code == 401 and "expired" in answer.json()["detail"]

    token = make_token(operator)
    session = APIClient()
    session.force_login(operator)
    assert session.get("/api/v1/nodes").status_code == 200
    operator.is_active = False
    operator.save()
    assert token_client(token).get("/api/v1/nodes").status_code == 401
    assert session.get("/api/v1/nodes").status_code == 401  # the session is anonymous now


@pytest.mark.django_db
def test_create_token_command_prints_the_secret_once_and_stores_its_digest(operator, capsys):
    from django.core.management import call_command

    call_command("create_token", "ops", "--name", "laptop", "--days", "7")
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert token not in every_stored_value()
    assert token_client(token).get("/api/v1/nodes").status_code == 200
    from llmgw.accounts.models import ApiToken

    made = ApiToken.objects.get(name="laptop")
    assert timedelta(days=6) < made.expires_at - timezone.now() <= timedelta(days=7)


@pytest.mark.django_db
def test_plaintext_drf_tokens_are_converted_and_their_table_dropped(operator):
    """An install upgraded from DRF's authtoken: its CLI configs keep
    working, and no token is left in clear."""
    from django.apps import apps

    migration = importlib.import_module("llmgw.accounts.migrations.0003_convert_drf_tokens")
    plain = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        # The table as rest_framework.authtoken's migrations leave it.
        cursor.execute(
            'CREATE TABLE "authtoken_token" ("key" varchar(40) PRIMARY KEY, '
            '"created" timestamp with time zone NOT NULL, "user_id" integer NOT NULL UNIQUE)'
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [plain, operator.pk])
    with connection.schema_editor() as editor:
        migration.convert(apps, editor)
    assert "authtoken_token" not in connection.introspection.table_names()
    assert plain not in every_stored_value()
    assert token_client(plain).get("/api/v1/nodes").status_code == 200


# -- throttled passwords ---------------------------------------------------


@pytest.mark.django_db
def test_the_token_endpoint_throttles_wrong_passwords(operator):
    client = APIClient()
    for _ in range(10):
        wrong = client.post(
            "/api/v1/token", {"username": "ops", "password": "guess"}, format="json"
        )
        assert wrong.status_code == 400
    refused = client.post("/api/v1/token", {"username": "ops", "password": PASSWORD}, format="json")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    # Another address is not held back by this one's guesses.
    other = client.post(
        "/api/v1/token",
        {"username": "ops", "password": PASSWORD},
        format="json",
        REMOTE_ADDR="10.1.1.1",
    )
    assert other.status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_the_login_pages_throttle_wrong_passwords(client, operator, path):
    operator.is_staff = True
    operator.save()
    for _ in range(10):
        wrong = client.post(path, {"username": "ops", "password": "guess"})
        assert wrong.status_code == 200  # the form again, with its error
    refused = client.post(path, {"username": "ops", "password": PASSWORD})
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_guessing_many_usernames_from_one_address_is_throttled_too(client, operator):
    for i in range(50):
        assert client.post("/login/", {"username": f"u{i}", "password": "x"}).status_code == 200
    assert client.post("/login/", {"username": "ops", "password": PASSWORD}).status_code == 429


# -- secret files 0600 from creation ---------------------------------------

_NO_CHMOD = (
    "import os, pathlib\n"
    "def refuse(*a, **k):\n"
    "    raise AssertionError(f'chmod after creation: {a}')\n"
    "os.chmod = os.fchmod = os.lchmod = pathlib.Path.chmod = refuse\n"
)


def run_embedded(data: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"LLMGW_DATA_DIR": str(data), "DJANGO_SETTINGS_MODULE": "llmgw.settings"}
    return subprocess.run(
        [sys.executable, "-c", _NO_CHMOD + "import django; django.setup()\n" + script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_the_embedded_data_and_every_secret_in_it_are_private_from_creation(tmp_path):
    data = tmp_path / "var"
    cli = data / "cli.yaml"
    out = run_embedded(
        data,
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        f"call_command('bootstrap_admin', cli_config=pathlib.Path({str(cli)!r}))\n",
    )
    assert out.returncode == 0, out.stderr
    assert mode(data) == "0o700"
    for name in ("llmgw.sqlite3", "secret_key", "cli.yaml"):
        assert mode(data / name) == "0o600", name
    for extra in data.glob("llmgw.sqlite3-*"):
        assert mode(extra) == "0o600", extra.name


def test_bootstrap_replaces_an_open_cli_config_with_a_private_one(tmp_path):
    data = tmp_path / "var"
    data.mkdir(mode=0o700)
    cli = data / "cli.yaml"
    cli.write_text("url: http://old\ntoken: stale\n")
    os.chmod(cli, 0o644)
    out = run_embedded(
        data,
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        f"call_command('bootstrap_admin', cli_config=pathlib.Path({str(cli)!r}))\n",
    )
    assert out.returncode == 0, out.stderr
    assert mode(cli) == "0o600"
    assert "stale" not in cli.read_text()


def test_the_demo_writes_no_file_before_its_umask_and_chmods_none():
    """deploy/demo.sh makes the data directory, the CLI config, the join
    token, Prometheus's copy of the API token and the gateway key: all under
    `umask 077`, set before its first write, none chmod-ed after the fact."""
    lines = [line.strip() for line in (ROOT / "deploy/demo.sh").read_text().splitlines()]
    code = [line for line in lines if line and not line.startswith("#")]
    assert "umask 077" in code
    first_write = next(
        i for i, line in enumerate(code) if re.search(r"(^|\s)(mkdir|>|touch)\s", line)
    )
    assert code.index("umask 077") < first_write, "the demo writes before its umask"
    chmods = [line for line in code if re.search(r"(^|[\s;(])chmod\s", line)]
    assert not chmods, f"a file made open and closed afterwards: {chmods}"
