"""A job whose evaluation waits for the device lock (another evaluation's timed loop holds it)
says so on its page: the step reads "waiting for the device (another evaluation is being
timed)" while the lock is held, and goes back to the evaluation's own step once it is free.
Another process holds a real lock file; the job row is real."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User

from tests.sandbox.test_devlock_wait import hold_exclusively
from webapp.jobs import services, worker_side
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK

pytestmark = pytest.mark.django_db(transaction=True)  # the probe's thread reads and writes the row


def step_of(job: Job) -> str:
    job.refresh_from_db()
    return job.step


def wait_for_step(job: Job, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while step_of(job) != text:
        assert time.monotonic() < deadline, f"step {job.step!r}, expected {text!r}"
        time.sleep(0.1)


def test_the_step_says_the_job_waits_for_the_device_while_another_times(tmp_path, monkeypatch):
    from sandbox.devlock import DeviceLock, prepare_dir

    monkeypatch.setattr(worker_side, "DEVICE_PROBE_S", 0.1)
    folder = prepare_dir(str(tmp_path / "locks"))
    job = services.start_job(services.create_job(User.objects.create_user("waiter"), "w", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False))
    state = worker_side.StepState()
    progress = worker_side._progress(job.pk, None, None, state)
    with worker_side.device_wait_shown(job.pk, None, "cpu", state, folder):
        progress("baseline", {"compile": True})
        assert step_of(job) == "preparing the baselines (building torch.compile)"
        holder = hold_exclusively(DeviceLock("cpu", folder).path, 1.5)
        try:
            wait_for_step(job, worker_side.DEVICE_WAIT)
        finally:
            holder.wait(timeout=10)
        wait_for_step(job, "preparing the baselines (building torch.compile)")
        progress("timing", {})  # from here this evaluation's own timing may hold the lock: no probe
        holder = hold_exclusively(DeviceLock("cpu", folder).path, 0.6)
        try:
            time.sleep(0.4)
            assert step_of(job) == "timing"
        finally:
            holder.wait(timeout=10)


def test_the_sandbox_can_say_it_waits_too():
    """sandbox.protocol's exclusive wait (progress("device_wait")) reads the same words."""
    assert worker_side.step_text("device_wait", {}) == "waiting for the device (another evaluation is being timed)"
