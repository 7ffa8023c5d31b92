"""Credentials: API tokens kept as digests, with an expiry, shown once; a
disabled user or a deleted key loses every credential within 2 s, measured
on the real server under load; password guessing throttled; every secret
file 0600 from the moment it exists."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from llmgw import embedded_db
from llmgw.catalog.models import Model
from llmgw.serving import keys
from llmgw.serving.models import ApiKey
from tests.embedded import reachable
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


# -- a disabled user or a deleted key is cut off within 2 s, under load -----


# The load: 40 clients asking the gateway's /v1/models and 8 asking the REST
# API, back to back, from a process of its own (so the probes' clocks here
# are not held up by it); it prints how many answers it got, and any error.
_LOAD = """
import asyncio, sys, aiohttp
url, key, token, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
served, failed = 0, []
async def hammer(session, path, header, until):
    global served
    while asyncio.get_running_loop().time() < until:
        try:
            async with session.get(url + path, headers={"Authorization": header}) as r:
                await r.read()
                served += r.status == 200
        except aiohttp.ClientError as exc:
            failed.append(repr(exc))
async def main():
    until = asyncio.get_running_loop().time() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(
            *[hammer(session, "/v1/models", "Bearer " + key, until) for _ in range(40)],
            *[hammer(session, "/api/v1/nodes", "Token " + token, until) for _ in range(8)],
        )
asyncio.run(main())
print(served, len(failed), failed[:3])
"""


class Load:
    """Steady load on the real server, and each probe credential sent every
    10 ms from a thread of its own, every answer recorded as (sent, status)."""

    def __init__(
        self, url: str, load_key: str, token: str, probes: dict[str, str], seconds: float
    ) -> None:
        self.url, self.probes = url, probes
        self.answers: dict[str, list[tuple[float, int]]] = {name: [] for name in probes}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._probe, args=(name, credential), daemon=True)
            for name, credential in probes.items()
        ]
        self._load = subprocess.Popen(
            [sys.executable, "-c", _LOAD, url, load_key, token, str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.served, self.failed = 0, 0

    def _probe(self, name: str, credential: str) -> None:
        if credential.startswith("sk-llmgw-"):
            path, header = "/v1/models", f"Bearer {credential}"
        else:
            path, header = "/api/v1/nodes", f"Token {credential}"
        with httpx.Client(base_url=self.url, headers={"Authorization": header}) as client:
            while not self._stop.is_set():
                sent = time.monotonic()
                status = client.get(path, timeout=10).status_code
                self.answers[name].append((sent, status))
                time.sleep(0.01)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        out, _ = self._load.communicate(timeout=60)
        served, failed, _ = out.split(" ", 2)
        self.served, self.failed = int(served), int(failed)

    def latest_acceptance(self, name: str, cut: float) -> float:
        """Seconds from `cut` to the sending of the last request accepted
        (0 when none was accepted after it)."""
        sent = [sent for sent, status in self.answers[name] if status == 200 and sent >= cut]
        return max(sent, default=cut) - cut

    def delay(self, name: str, cut: float) -> float:
        """Seconds from `cut` until this probe is refused for good: the
        sending time of the first refusal after the last acceptance."""
        last = cut + self.latest_acceptance(name, cut)
        refused = [sent for sent, status in self.answers[name] if status != 200 and sent >= last]
        assert refused, f"{name}: never refused after the cut"
        return min(refused) - cut


def user_with_credentials(name: str) -> tuple[User, str, str]:
    user = User.objects.create_user(name, password=PASSWORD)
    key = keys.create_key(f"{name}-key", user, all_models=True).key
    return user, key, make_token(user)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["revoke", "delete key", "disable user", "delete user"])
def test_a_cut_credential_is_refused_within_2_s_under_load(asgi_server, how, capsys):
    """Eight users' credentials cut 0.13 s apart, so that the cuts meet the
    gateway's key refresh at every phase of its cycle, the worst included."""
    Model.objects.create(name="tiny", source="hf://x/tiny")
    _, load_key, token = user_with_credentials("steady")
    victims = [user_with_credentials(f"victim{i}") for i in range(8)]
    probes = {f"key{i}": key for i, (_, key, _) in enumerate(victims)}
    if how in ("disable user", "delete user"):
        probes |= {f"token{i}": token for i, (_, _, token) in enumerate(victims)}
    cuts: dict[str, float] = {}
    with Load(asgi_server, load_key, token, probes, seconds=6.5) as load:
        time.sleep(2.0)
        for i, (user, _, _) in enumerate(victims):
            if how == "revoke":
                keys.revoke_key(ApiKey.objects.get(owner=user))
            elif how == "delete key":
                ApiKey.objects.filter(owner=user).delete()
            elif how == "disable user":
                user.is_active = False
                user.save(update_fields=["is_active"])
            else:
                user.delete()
            cuts[f"key{i}"] = cuts[f"token{i}"] = time.monotonic()
            time.sleep(0.13)
        time.sleep(2.5)
    assert not load.failed
    assert load.served > 2000, f"only {load.served} requests served: no load"
    delays = {name: load.delay(name, cuts[name]) for name in probes}
    # The latest acceptance is what shows a cut late. The first refusal's
    # sending time adds the probe's own round trip before it (the probe
    # waits for one answer before sending the next), which a loaded machine
    # stretches past half a second: printed, not held to the margin.
    latest = {name: load.latest_acceptance(name, cuts[name]) for name in probes}
    with capsys.disabled():
        print(
            f"\n{how}: {load.served} requests served under load; latest acceptance "
            f"{max(latest.values()):.3f} s after its cut, first refusals "
            f"({', '.join(f'{n} {d:.2f}' for n, d in delays.items())})"
        )
    for name, late in latest.items():
        assert late < 2.0, f"{how}: {name} accepted {late:.2f} s after the cut"
        assert late < 1.5, f"{how}: {name} accepted {late:.2f} s after the cut, too little margin"


@pytest.mark.slow
def test_a_revoked_key_is_refused_within_2_s_when_the_key_table_loads_slowly(
    transactional_db, monkeypatch
):
    """The gateway's worst case, made to happen rather than hoped for: the
    key is revoked just after a load of the key table has read it, and each
    load takes 1.2 s (a slow database, or a process starved of CPU: one took
    0.63 s on a loaded two-core machine). The next load must start on the
    gateway's beat, not a whole period after this one ended."""
    from django.core.asgi import get_asgi_application

    from llmgw.serving.gateway import snapshot
    from llmgw.serving.gateway.app import Gateway, mount
    from tests.servers import ServerThread

    Model.objects.create(name="tiny", source="hf://x/tiny")
    created = keys.create_key("victim", None, all_models=True)
    real, armed, cut = snapshot.load_keys, threading.Event(), []

    def slow(digests: list[str] | None = None) -> Any:
        if digests is not None:  # a lookup of one unknown key: not the table
            return real(digests)
        time.sleep(1.2)
        table = real()
        if armed.is_set() and not cut:
            ApiKey.objects.filter(pk=created.api_key.pk).update(revoked_at=timezone.now())
            cut.append(time.monotonic())
        return table

    monkeypatch.setattr(snapshot, "load_keys", slow)
    gateway = Gateway()
    server = ServerThread(mount(gateway, get_asgi_application())).start()
    answers: list[tuple[float, int]] = []
    try:
        with httpx.Client(headers={"Authorization": f"Bearer {created.key}"}) as client:
            assert client.get(server.url + "/v1/models", timeout=30).status_code == 200
            armed.set()
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and (not cut or answers[-1][1] == 200):
                sent = time.monotonic()
                answers.append((sent, client.get(server.url + "/v1/models").status_code))
                time.sleep(0.01)
    finally:
        server.call(gateway.stop())
        server.stop()
    assert cut, "the table never loaded after the test armed it"
    accepted = [sent - cut[0] for sent, status in answers if status == 200 and sent > cut[0]]
    assert answers[-1][1] == 401
    assert max(accepted, default=0.0) < 2.0, f"accepted {max(accepted):.2f} s after revocation"


@pytest.mark.slow
def test_a_re_enabled_user_gets_their_key_back(asgi_server):
    Model.objects.create(name="tiny", source="hf://x/tiny")
    user, key, _ = user_with_credentials("back")

    def status() -> int:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.get(asgi_server + "/v1/models", headers=headers, timeout=10).status_code

    assert status() == 200
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert wait_for(lambda: status() == 401, 2.0)
    assert status() == 401  # asked again: refused, as a key of a disabled user
    User.objects.filter(pk=user.pk).update(is_active=True)
    assert wait_for(lambda: status() == 200, 2.0)


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# -- secret files 0600 from creation ---------------------------------------

# One chmod is allowed: run as root, the data directory is opened to the
# embedded database's own account (0710: it passes through, lists nothing).
# Every other chmod would be a file made open and closed afterwards.
_NO_CHMOD = (
    "import os, pathlib\n"
    "chmod = os.chmod\n"
    "def refuse(*a, **k):\n"
    "    if len(a) == 2 and isinstance(a[0], pathlib.Path) and a[1] == 0o710 and os.geteuid() == 0:\n"
    "        return chmod(*a, **k)\n"
    "    raise AssertionError(f'chmod after creation: {a}')\n"
    "os.chmod = os.fchmod = os.lchmod = pathlib.Path.chmod = refuse\n"
)


def run_embedded(data: Path, script: str) -> subprocess.CompletedProcess[str]:
    """`script` on the embedded default in `data`; its database is stopped after."""
    reachable(data.parent)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"LLMGW_DATA_DIR": str(data), "DJANGO_SETTINGS_MODULE": "llmgw.settings"}
    try:
        return subprocess.run(
            [sys.executable, "-c", _NO_CHMOD + "import django; django.setup()\n" + script],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        embedded_db.stop(data)


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
    if os.geteuid() == 0:
        # The embedded database's own account passes through to its directory.
        assert mode(data) == "0o710"
        assert data.stat().st_gid == embedded_db.server_account().pw_gid
    else:
        assert mode(data) == "0o700"
    assert mode(data / "postgres") == "0o700"
    for name in ("secret_key", "cli.yaml", "postgres.lock"):
        assert mode(data / name) == "0o600", name


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
