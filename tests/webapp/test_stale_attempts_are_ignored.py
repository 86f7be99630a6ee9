"""A lost attempt's work never shows and does not run on (issue 20): its progress does not touch
the job the next attempt runs, its evaluations are not started, and one already running is
interrupted within seconds, even in a long phase that reports no progress."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User

from webapp.jobs import scheduler, services
from webapp.jobs.models import Job
from webapp.jobs.run import worker
from webapp.jobs.sample_trajectory import SOFTMAX_TASK

pytestmark = pytest.mark.django_db(transaction=True)  # the watcher thread reads with a connection of its own


@pytest.fixture
def resumed():
    """A job whose attempt 1 was lost and attempt 2 runs now."""
    owner = User.objects.create_user("owner", password="pw-owner-123")
    job = services.create_job(owner, "softmax", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    scheduler.claim(job.pk)
    Job.objects.filter(pk=job.pk).update(state=Job.State.QUEUED)
    job = scheduler.claim(job.pk)
    assert job.attempts == 2
    return job


def test_progress_of_the_lost_attempt_never_shows(resumed) -> None:
    services.set_step(resumed.pk, "checking correctness 3/5", attempt=1)
    assert Job.objects.get(pk=resumed.pk).step == "starting"
    services.set_step(resumed.pk, "checking correctness 3/5", attempt=2)
    assert Job.objects.get(pk=resumed.pk).step == "checking correctness 3/5"


def test_a_turn_of_the_lost_attempt_is_not_stored(resumed) -> None:
    assert services.store_turn(resumed, 1, [{"type": "turn_started", "turn": 1}], attempt=1) is None
    assert not resumed.turns.exists()


def test_an_evaluation_of_the_lost_attempt_is_not_started(resumed) -> None:
    result = worker.evaluate_for_job(SOFTMAX_TASK, {"model_new.py": "x"}, {"backend": "cpu"}, resumed.pk, attempt=1)
    assert result["status"] == "runtime_error"
    assert result["reasons"] == [f"abandoned: attempt 1 of job {resumed.pk} no longer runs it"]


def test_a_running_evaluation_of_a_lost_attempt_is_interrupted_in_seconds(resumed, monkeypatch) -> None:
    monkeypatch.setattr(worker, "RECHECK_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(worker.Abandoned, match="attempt 1 of job"), worker.watched(None, resumed.pk, 1):
        time.sleep(30)  # a long phase that reports nothing (timing baselines)
    assert time.monotonic() - t0 < 20


def test_the_current_attempts_evaluation_runs_on(resumed, monkeypatch) -> None:
    monkeypatch.setattr(worker, "RECHECK_S", 0.2)
    with worker.watched(None, resumed.pk, 2):
        time.sleep(1.0)  # checked a few times, wanted each time
