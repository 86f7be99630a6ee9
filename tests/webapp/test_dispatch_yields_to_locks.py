"""The monitor's dispatch never deadlocks another session's table locks (PostgreSQL).

Its transaction locks queued jobs and reads their owners. A session that locks the same tables
the other way round (a test database's flush, a migration) used to deadlock with it, and the
server aborted whichever checked first: CI once lost a flush that way to a live agent worker's
monitor. The dispatch now gives up on a lock it cannot get within DISPATCH_LOCK_TIMEOUT, and
holds nothing afterwards."""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, connections

from webapp.jobs import scheduler

pytestmark = pytest.mark.django_db(transaction=True)


def _locks_held_here(table: str) -> list[str]:
    """The lock modes this test's own connection holds on `table`. Asked of pg_locks by backend
    pid rather than by taking a NOWAIT lock: the session's live agent workers run the monitor's
    dispatch against the same database and hold jobs_job briefly while they wait on auth_user."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE c.relname = %s AND l.pid = pg_backend_pid()",
            [table],
        )
        return [mode for (mode,) in cursor.fetchall()]


def test_the_dispatch_gives_up_on_a_locked_owner_table_and_holds_no_lock_on_jobs() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("lock timeouts and table locks are PostgreSQL's; SQLite locks the whole file")
    other = connections.create_connection("default")
    other.set_autocommit(False)
    other.inc_thread_sharing()  # the release timer's thread rolls it back
    release = threading.Timer(20.0, other.rollback)  # without the timeout the dispatch waits for this
    try:
        with other.cursor() as cursor:
            cursor.execute("LOCK TABLE auth_user IN ACCESS EXCLUSIVE MODE")
        release.start()
        with pytest.raises(OperationalError, match="lock timeout"):
            scheduler.dispatch()
        assert release.is_alive(), "the dispatch waited for the lock holder instead of giving up"
        assert _locks_held_here("jobs_job") == [], "the dispatch kept its locks on jobs"
    finally:
        release.cancel()
        other.rollback()
        other.dec_thread_sharing()
        other.close()
