"""What only the PostgreSQL store has: URLs, connection errors, its schema, its clock."""

from __future__ import annotations

import re
import threading

import psycopg
import pytest

from tether.errors import StoreError, UsageError
from tether.runs import open_store
from tether.runs._postgres import _MIGRATIONS, SCHEMA_VERSION, PostgresStore, redact

from . import pg
from .support import check_lane_of_before, write_lane_of_before

pytestmark = pytest.mark.slow


def _with_password(url: str, password: str) -> str:
    return re.sub(r"^(postgresql://[^:/@]+):[^@]*@", rf"\1:{password}@", url)


def test_both_url_forms_open_the_postgres_store_and_the_password_is_never_shown(
    pg_url: str,
) -> None:
    """`postgresql://` and `postgres://` both select it; its `url` hides the password."""
    for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
        store = open_store(url)
        try:
            assert isinstance(store, PostgresStore)
            assert pg.PASSWORD not in store.url
            assert store.add_item("a", "do a") == (url == pg_url)
        finally:
            store.close()
    assert redact("postgresql://u:s3cret@h:5/d?password=s3cret") == (
        "postgresql://u:***@h:5/d?password=***"
    )


def test_a_bad_url_is_a_usage_error_in_one_line() -> None:
    """A port that is not a number, or a URL libpq cannot parse, says how to write it."""
    for url in (
        "postgresql://u:s3cret@127.0.0.1:notaport/db",
        "postgresql://u:s3cret@127.0.0.1:5432/db?nosuchoption=1",
    ):
        with pytest.raises(UsageError) as caught:
            open_store(url)
        text = str(caught.value)
        assert "postgresql://USER:PASSWORD@HOST:PORT/DATABASE" in text
        assert "s3cret" not in text
        assert "\n" not in text


def test_a_refused_connection_says_to_start_the_server() -> None:
    """Nothing listens on the port: one line, naming the store without its password."""
    with pytest.raises(StoreError) as caught:
        open_store(f"postgresql://u:s3cret@127.0.0.1:{pg._free_port()}/db")
    text = str(caught.value)
    assert "cannot reach the PostgreSQL store postgresql://u:***@127.0.0.1:" in text
    assert "start the server" in text
    assert "s3cret" not in text
    assert "\n" not in text


def test_a_refused_login_says_to_fix_the_user_and_password(pg_url: str) -> None:
    """A wrong password: the login is refused in one line, and no password is shown."""
    wrong = _with_password(pg_url, "wrong-pass-4711")
    try:
        psycopg.connect(wrong).close()
    except psycopg.OperationalError:
        pass
    else:
        pytest.skip("the server at TETHER_TEST_PG_URL does not check passwords")
    with pytest.raises(StoreError) as caught:
        open_store(wrong)
    text = str(caught.value)
    assert "refused the login" in text
    assert "fix the user and password" in text
    assert "wrong-pass-4711" not in text
    assert pg.PASSWORD not in text


def test_a_missing_database_says_to_create_it(pg_server: str) -> None:
    """A database that is not there: create it, or fix the URL."""
    with pytest.raises(StoreError, match=r"no such database .*create it"):
        open_store(pg.with_database(pg_server, "t_not_there"))


def test_a_database_of_a_newer_schema_is_refused_with_what_to_do(pg_url: str) -> None:
    """A store written by a newer tether is never written to by this one."""
    PostgresStore.open(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE tether_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError) as caught:
        open_store(pg_url)
    assert str(caught.value) == (
        f"the PostgreSQL store {redact(pg_url)} has schema version "
        f"{SCHEMA_VERSION + 1}, newer than this tether's ({SCHEMA_VERSION}); "
        "upgrade tether on this machine"
    )


def test_a_database_of_the_first_schema_gains_the_lane_facts(pg_url: str) -> None:
    """A database a tether of schema 1 made opens: its lanes are kept, each one's last
    stage is taken from its ledger once, and sessions are recorded from then on."""
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
        conn.execute("CREATE TABLE tether_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO tether_schema (version) VALUES (1)")
        conn.execute(_MIGRATIONS[0])
        write_lane_of_before(conn.execute)
    store = PostgresStore.open(pg_url)
    try:
        check_lane_of_before(store)
    finally:
        store.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM tether_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]


def test_runs_starting_at_once_make_the_schema_once(pg_url: str) -> None:
    """Eight stores opened at the same instant on an empty database all succeed, and
    the schema holds one version row (the advisory lock serializes them)."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def opener() -> None:
        barrier.wait()
        try:
            PostgresStore.open(pg_url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM tether_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]


def test_leases_run_on_the_server_clock(pg_url: str) -> None:
    """Without a test clock the store's time is the server's: a lease expires 60 s
    after the server's now, whatever the caller's clock says."""
    store = PostgresStore.open(pg_url)
    try:
        store.add_item("a", "do a")
        before = store.now()
        claim = store.take_claim("r", "l", only=None, host="h", pid=1, lease=60)
        after = store.now()
        assert claim is not None
        assert before + 60 <= claim.expires <= after + 60
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT extract(epoch FROM clock_timestamp())"
            ).fetchone()
        assert row is not None
        assert abs(float(row[0]) - store.now()) < 5
    finally:
        store.close()


def test_the_verbs_take_a_postgres_url_from_store_or_the_environment(
    pg_url: str,
) -> None:
    """`queue add/list` and `runs` work on the PostgreSQL store by `--store` or
    TETHER_STORE; a store that cannot be reached is one line and exit 1, a bad URL
    exit 2, neither showing the password."""
    import json

    from .support import tether

    assert (
        tether("queue", "add", "one", "--brief", "b1", "--store", pg_url).returncode
        == 0
    )
    env = {"TETHER_STORE": pg_url}
    assert tether("queue", "add", "two", "--brief", "b2", env=env).returncode == 0
    listed = json.loads(tether("queue", "list", "--json", env=env).stdout)
    assert [(i["id"], i["state"]) for i in listed] == [
        ("one", "queued"),
        ("two", "queued"),
    ]
    assert json.loads(tether("runs", "--json", "--store", pg_url).stdout) == []
    down = tether(
        "queue",
        "list",
        "--store",
        f"postgresql://u:s3cret@127.0.0.1:{pg._free_port()}/d",
    )
    assert down.returncode == 1
    assert "cannot reach the PostgreSQL store" in down.stderr
    bad = tether("queue", "list", "--store", "postgresql://u:s3cret@127.0.0.1:x/d")
    assert bad.returncode == 2
    for done in (down, bad):
        assert "s3cret" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_status_reads_the_stop_when_the_store_of_runs_cannot_be_reached() -> None:
    """`tether status` with a PostgreSQL store that is down still gives the stop's
    reading, exit 0, and says in one line that the runs cannot be read."""
    import json

    from .support import tether

    env = {"TETHER_STORE": f"postgresql://u:s3cret@127.0.0.1:{pg._free_port()}/d"}
    plain = tether("status", env=env)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0].startswith("CLEAR")
    assert "runs: cannot be read: cannot reach the PostgreSQL store" in plain.stdout
    as_json = tether("status", "--json", env=env)
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["runs"] == []
    assert "runs: cannot be read" in as_json.stderr
    for done in (plain, as_json):
        assert "s3cret" not in done.stdout + done.stderr


def test_a_store_session_commits_durably_even_where_the_server_defaults_not_to(
    pg_url: str,
) -> None:
    """The test server runs with `synchronous_commit = off`; the store's own session
    turns it on, so a claim it reports taken survives a server crash."""
    store = PostgresStore.open(pg_url)
    try:
        row = store._conn.execute("SHOW synchronous_commit").fetchone()
    finally:
        store.close()
    assert row not in (("off",), ("local",))
