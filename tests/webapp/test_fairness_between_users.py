"""Fairness between users (issue 20): one user's pile of jobs and evaluations cannot starve
another's. Jobs: at most KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER of one user's run at once, free
agent slots go to whoever has the fewest jobs running, and every waiting job says where it waits
and why (its step and reason, on the job page's data). Evaluations: a user's first evaluation is
served before another user's backlog (priorities on the gpu queue, taken in that order by a real
worker), and a user may have at most KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER outstanding.

The job tests keep their rows in the test's own transaction (no other process sees them) and
hand the picked jobs to the real agent queue in Redis; a worker that takes such a message finds
no job and does nothing."""

from __future__ import annotations

import sys
import uuid

import pytest
import redis
from django.contrib.auth.models import User
from django.utils import timezone

from tests.support.processes import ManagedProcess, wait_for
from tests.webapp import fair_order_tasks
from webapp.celery import app
from webapp.jobs import scheduler, services
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK


@pytest.fixture
def limits(settings):
    settings.KERNELWRIGHT_AGENT_SLOTS = 2
    settings.KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER = 2
    settings.KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER = 4
    return settings


def jobs_of(user, n: int) -> list[Job]:
    return [services.create_job(user, f"{user.username} {i}", SOFTMAX_TASK, {"backend": "cpu"}) for i in range(n)]


def state(job: Job) -> Job:
    job.refresh_from_db()
    return job


@pytest.mark.django_db
def test_a_second_user_is_not_starved_by_the_first_ones_pile_of_jobs(limits, client) -> None:
    alice, bob, carol = (User.objects.create_user(n, password="pw-" + n + "-123") for n in ("alice", "bob", "carol"))
    a = jobs_of(alice, 5)
    b = jobs_of(bob, 1)

    assert scheduler.dispatch() == 2
    assert state(a[0]).dispatched_at and state(b[0]).dispatched_at  # one each, though alice queued first
    assert [state(j).dispatched_at for j in a[1:]] == [None] * 4
    # Where each waits, and why: the next of alice's for a free slot, the rest for her own jobs.
    assert state(a[1]).step == "queued: position 1 for a free agent slot"
    assert "all 2 agent slots are busy" in a[1].reason
    assert state(a[2]).step == "queued: waiting for one of your running jobs to end"
    assert (
        "alice already has 2 job(s) running" in a[2].reason
        and "KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER=2" in a[2].reason
    )

    # The job page's data says the same (what the page and the API show).
    client.force_login(alice)
    live = client.get(f"/jobs/{a[2].pk}/updates/").json()["live"]
    assert live["state"] == "queued" and live["step"] == a[2].step and live["reason"] == a[2].reason

    # Both start; bob's ends; carol arrives: the free slot is hers, not alice's third.
    for job in (a[0], b[0]):
        assert scheduler.claim(job.pk) is not None
    c = jobs_of(carol, 1)
    services.finish_job(state(b[0]), Job.State.SUCCEEDED, "done")
    scheduler.dispatch()
    assert state(c[0]).dispatched_at is not None
    assert state(a[1]).dispatched_at is None and state(a[1]).step == "queued: position 1 for a free agent slot"

    # Alice's running job ends: her next one takes the slot, the others still wait for her limit.
    assert scheduler.claim(c[0].pk) is not None
    services.finish_job(state(a[0]), Job.State.SUCCEEDED, "done")
    services.finish_job(state(c[0]), Job.State.SUCCEEDED, "done")
    scheduler.dispatch()
    assert state(a[1]).dispatched_at is not None and state(a[2]).dispatched_at is not None
    assert "already has 2 job(s) running" in state(a[3]).reason


@pytest.mark.django_db
def test_a_lost_job_is_taken_back_with_its_reason_and_a_late_message_cannot_start_it_twice(limits) -> None:
    alice = User.objects.create_user("alice", password="pw-alice-123")
    job = jobs_of(alice, 1)[0]
    claimed = scheduler.claim(job.pk)
    assert claimed.attempts == 1 and scheduler.claim(job.pk) is None  # a redelivery while it lives: dropped
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timezone.timedelta(minutes=5))
    assert scheduler.reap() == [job.pk]
    job = state(job)
    assert job.state == "queued" and "its agent worker stopped answering" in job.reason
    assert "resumes from its 0 stored turn(s) (start 2 of at most 3)" in job.reason
    assert not scheduler.is_current(job.pk, 1)  # the lost attempt's evaluations are no longer wanted
    assert scheduler.claim(job.pk).attempts == 2


def test_evaluations_are_served_in_a_fair_order_between_users(redis_url, tmp_path, limits) -> None:
    """Alice sends four evaluations, then bob one: a real worker takes bob's before alice's
    second. A fifth of alice's is refused (the API's 429) or, for a job's run, waits."""
    alice, bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    order_key = f"kwtest:fair:{uuid.uuid4().hex}"
    sent = []
    for label, user in [("a1", alice), ("a2", alice), ("a3", alice), ("a4", alice), ("b1", bob)]:
        task_id = uuid.uuid4().hex
        priority = scheduler.reserve_gpu_slot(user, task_id, wait=False)
        sent.append((user, task_id))
        app.send_task(
            "kwtest.fair.record",
            args=[order_key, label],
            queue=fair_order_tasks.QUEUE,
            priority=priority,
            task_id=task_id,
        )
    with pytest.raises(scheduler.TooManyEvaluations) as refused:
        scheduler.reserve_gpu_slot(alice, uuid.uuid4().hex, wait=False)
    assert "4 evaluations of yours are queued or running" in str(refused.value)

    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "webapp.celery:app",
        "worker",
        "-Q",
        fair_order_tasks.QUEUE,
        "-n",
        "fair@%h",
        "-c",
        "1",
        "-I",
        "tests.webapp.fair_order_tasks",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]
    worker = ManagedProcess.start("worker-fair", argv, {**__import__("os").environ, "REDIS_URL": redis_url}, tmp_path)
    client = redis.Redis.from_url(redis_url)
    try:
        wait_for(lambda: client.llen(order_key) == 5, 120, interval=0.3, what="the five tasks run")
        order = [x.decode() for x in client.lrange(order_key, 0, -1)]
    finally:
        worker.stop()
        for user, task_id in sent:
            scheduler.release_gpu_slot(user, task_id)
        client.close()
    assert order == ["a1", "b1", "a2", "a3", "a4"], order  # plain FIFO would be a1 a2 a3 a4 b1
