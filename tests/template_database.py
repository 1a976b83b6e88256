"""The test databases of a run of pytest-xdist workers, migrated once: the first
worker to need a database migrates its own and copies it as the run's template; each
other worker starts from a copy of the template instead of running the 56 migrations
again (about 5 s of CPU a worker, while every worker of make test's two runs starts at
once). At the end a worker drops its database (PostgreSQL's after ending the sessions
its threads left) and the controller the template (tests/conftest.py).

Only public means: the sqlite3 module's online backup, PostgreSQL's CREATE DATABASE
... TEMPLATE (Django's TEST "TEMPLATE" setting) and Django's setup_databases (with
keepdb on SQLite, where it finds the copy and checks that nothing is left to migrate).
The workers take turns under a file lock."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import sqlite3
import tempfile
from pathlib import Path

from django.db import connections
from django.test.utils import setup_databases, teardown_databases

ALIAS = "default"


def run_folder(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"loom-test-run-{run_id}"


@contextlib.contextmanager
def _taking_turns(folder: Path):
    folder.mkdir(exist_ok=True)
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _postgres_template(run_id: str) -> str:
    return f"test_loom_template_{run_id[:16]}"


def _on_the_server(connection, statement: str) -> None:
    """Run CREATE or DROP DATABASE from the server's "postgres" database, outside any
    transaction (as they must be, and with no session on the databases they copy)."""
    import psycopg

    s = connection.settings_dict
    with psycopg.connect(
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as server:
        server.execute(statement)


def setup_from_template(*, run_id: str, verbosity: int) -> list:
    """setup_databases() for this worker, from the run's template when there is one
    (made from this worker's database when there is none yet)."""
    connection = connections[ALIAS]
    folder = run_folder(run_id)
    sqlite = connection.vendor == "sqlite"
    marker = folder / "template"
    with _taking_turns(folder):
        if not marker.exists():
            config = setup_databases(verbosity, interactive=False, aliases={ALIAS})
            _make_template(connection, folder, run_id)
            marker.write_text(connection.vendor)
            return config
        if sqlite:
            test_file = connection.settings_dict["TEST"]["NAME"]
            with (
                contextlib.closing(sqlite3.connect(folder / "template.sqlite3")) as source,
                contextlib.closing(sqlite3.connect(test_file)) as copy,
            ):
                source.backup(copy)
            return setup_databases(verbosity, interactive=False, aliases={ALIAS}, keepdb=True)
        connection.settings_dict["TEST"]["TEMPLATE"] = _postgres_template(run_id)
        return setup_databases(verbosity, interactive=False, aliases={ALIAS})


def _make_template(connection, folder: Path, run_id: str) -> None:
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        with contextlib.closing(sqlite3.connect(folder / "template.sqlite3")) as template:
            connection.connection.backup(template)
        return
    name = connection.settings_dict["NAME"]
    connection.close()  # PostgreSQL copies a database no session is connected to
    _on_the_server(connection, f'CREATE DATABASE "{_postgres_template(run_id)}" TEMPLATE "{name}"')


def teardown(config: list) -> None:
    """teardown_databases(), after ending the sessions other threads of this worker left
    on its PostgreSQL database (a site's or a socket's thread): DROP DATABASE refuses
    a database in use, and the run would leave it behind."""
    connection = connections[ALIAS]
    if connection.vendor == "postgresql":
        name = connection.settings_dict["NAME"]
        connection.close()
        _on_the_server(
            connection,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{name}' AND pid <> pg_backend_pid()",
        )
    teardown_databases(config, verbosity=0)


def template_remove(*, run_id: str) -> None:
    """The controller's clean-up once its workers have ended."""
    folder = run_folder(run_id)
    marker = folder / "template"
    if marker.exists() and marker.read_text() == "postgresql":
        _on_the_server(
            connections[ALIAS], f'DROP DATABASE IF EXISTS "{_postgres_template(run_id)}"'
        )
    shutil.rmtree(folder, ignore_errors=True)
