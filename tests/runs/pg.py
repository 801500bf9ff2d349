"""A real PostgreSQL server for the store tests and the claims benchmark.

`TETHER_TEST_PG_URL` names a server to use (its user may create databases); without it a
private throwaway cluster is made with the machine's `initdb` and `pg_ctl`, listening on
a free loopback port with its socket in a temporary folder, and removed at the end.
PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres`
account (the Debian package makes it). Each test gets a fresh database.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import psycopg
from tests.machine import hidden, which

if TYPE_CHECKING:
    from collections.abc import Iterator

URL_ENV = "TETHER_TEST_PG_URL"
PASSWORD = "tether-test-secret"
"""The throwaway cluster's password: the tests check it never shows in messages."""

# The throwaway cluster keeps nothing worth a disk flush: its data dies with the tests.
_FAST = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"


class Missing(Exception):
    """No server can be had on this machine; the message says what to install."""


def binaries() -> Path | None:
    """The folder of the newest installed `initdb` and `pg_ctl`, or None."""
    if hidden("initdb"):
        return None
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    initdb = which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_owner() -> tuple[list[str], int, int]:
    """The command prefix that runs the cluster's programs, and their uid and gid."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        raise Missing(
            "PostgreSQL refuses to run as root and there is no `postgres` account: "
            "apt-get install postgresql, or set TETHER_TEST_PG_URL"
        ) from None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise Missing("setpriv (util-linux) is missing: apt-get install util-linux")
    prefix = [
        setpriv,
        f"--reuid={account.pw_uid}",
        f"--regid={account.pw_gid}",
        "--clear-groups",
    ]
    return prefix, account.pw_uid, account.pw_gid


@contextlib.contextmanager
def cluster(*, durable: bool = False) -> Iterator[str]:
    """Start a private cluster; yields the URL of its `postgres` database (superuser).

    `durable` keeps PostgreSQL's flushes on (as a real server has them); the tests
    leave them off.

    Raises:
        Missing: no PostgreSQL binaries, or no account to run them as.
    """
    bindir = binaries()
    if bindir is None:
        raise Missing(
            "the PostgreSQL server (initdb, pg_ctl) is not installed: "
            "apt-get install postgresql, or set TETHER_TEST_PG_URL"
        )
    prefix, uid, gid = _as_owner()
    top = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    try:
        os.chown(top, uid, gid)
        pwfile = top / "pw"
        pwfile.write_text(PASSWORD + "\n", encoding="utf-8")
        os.chown(pwfile, uid, gid)
        env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        subprocess.run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(top / "data"),
                "-U",
                "tether",
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            env=env,
        )
        pg_ctl = [*prefix, str(bindir / "pg_ctl"), "-D", str(top / "data")]
        port = _start(pg_ctl, top, env, "" if durable else _FAST)
        try:
            yield f"postgresql://tether:{PASSWORD}@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                [*pg_ctl, "-m", "immediate", "-w", "stop"],
                capture_output=True,
                check=False,
                env=env,
            )
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _start(pg_ctl: list[str], top: Path, env: dict[str, str], extra: str) -> int:
    """Start the server on a free port (another may take the port first: try again)."""
    last = ""
    for _ in range(5):
        port = _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {top} {extra}"
        done = subprocess.run(
            [*pg_ctl, "-l", str(top / "log"), "-w", "-t", "60", "-o", options, "start"],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        if done.returncode == 0:
            return port
        last = (top / "log").read_text(errors="replace")[-2000:] + done.stderr
    raise RuntimeError(f"the throwaway PostgreSQL server did not start: {last}")


@contextlib.contextmanager
def server() -> Iterator[str]:
    """`TETHER_TEST_PG_URL` when set, else a throwaway cluster's URL."""
    given = os.environ.get(URL_ENV)
    if given:
        yield given
        return
    with cluster() as url:
        yield url


def with_database(url: str, name: str) -> str:
    """`url` with its database replaced by `name` (still a postgresql:// URL)."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    user, password = params.get("user"), params.get("password")
    host, port = str(params.get("host") or ""), params.get("port")
    auth = ""
    if user:
        auth = quote(str(user)) + (f":{quote(str(password))}" if password else "") + "@"
    query = ""
    if host.startswith("/"):
        host, query = "", f"?host={quote(host)}"
    where = host + (f":{port}" if port else "")
    return f"postgresql://{auth}{where}/{name}{query}"


@contextlib.contextmanager
def fresh_database(admin_url: str, name: str) -> Iterator[str]:
    """A new empty database on the server; dropped (with its connections) at the end."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
