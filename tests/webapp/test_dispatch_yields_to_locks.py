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
        with other.cursor() as cursor:  # the dispatch released what it had locked
            cursor.execute("LOCK TABLE jobs_job IN ACCESS EXCLUSIVE MODE NOWAIT")
    finally:
        release.cancel()
        other.rollback()
        other.dec_thread_sharing()
        other.close()
