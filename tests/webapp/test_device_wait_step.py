"""A job whose evaluation waits for the device lock (another evaluation's timed loop holds it)
says so on its page: the step reads "waiting for the device (another evaluation is being
timed)" while the lock is held, and goes back to the evaluation's own step once it is free.
Another process holds a real lock file; the gpu worker's side reports to the real Redis under
the task's progress key and the agent's evaluator relays each report to the real job row."""

from __future__ import annotations

import time
import uuid

import pytest
from django.contrib.auth.models import User

from tests.sandbox.test_devlock_wait import hold_exclusively
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.run import progress, worker
from webapp.jobs.run.sender import CeleryEvaluator
from webapp.jobs.sample_trajectory import SOFTMAX_TASK
from webapp.queues import progress_key

pytestmark = pytest.mark.django_db(transaction=True)  # the probe's thread reports while the test reads


class Relay:
    """The sender's side of one task: each poll hands the latest new report on to the job."""

    def __init__(self, job: Job, task_id: str) -> None:
        self.evaluator = CeleryEvaluator(job.pk)
        self.client, self.task_id, self.seen = worker._redis(), task_id, 0

    def poll(self) -> None:
        self.seen = self.evaluator._relay(self.client.get(progress_key(self.task_id)), self.seen, None)


def step_of(job: Job) -> str:
    job.refresh_from_db()
    return job.step


def wait_for_step(job: Job, relay: Relay, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    relay.poll()
    while step_of(job) != text:
        assert time.monotonic() < deadline, f"step {job.step!r}, expected {text!r}"
        time.sleep(0.1)
        relay.poll()


def test_the_step_says_the_job_waits_for_the_device_while_another_times(tmp_path, monkeypatch):
    from sandbox.devlock import DeviceLock, prepare_dir

    monkeypatch.setattr(worker, "DEVICE_PROBE_S", 0.1)
    folder = prepare_dir(str(tmp_path / "locks"))
    job = services.start_job(
        services.create_job(User.objects.create_user("waiter"), "w", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    )
    task_id = str(uuid.uuid4())
    relay = Relay(job, task_id)
    report, state = progress.reporter(worker._redis(), task_id), worker.StepState()
    on_progress = worker.sandbox_progress(report, state)
    with worker.device_wait_shown(report, "cpu", state, folder):
        on_progress("baseline", {"compile": True})
        wait_for_step(job, relay, "preparing the baselines (building torch.compile)")
        holder = hold_exclusively(DeviceLock("cpu", folder).path, 1.5)
        try:
            wait_for_step(job, relay, progress.DEVICE_WAIT)
        finally:
            holder.wait(timeout=10)
        wait_for_step(job, relay, "preparing the baselines (building torch.compile)")
        on_progress("timing", {})  # from here this evaluation's own timing may hold the lock: no probe
        holder = hold_exclusively(DeviceLock("cpu", folder).path, 0.6)
        try:
            time.sleep(0.4)
            relay.poll()
            assert step_of(job) == "timing"
        finally:
            holder.wait(timeout=10)


def test_a_report_is_relayed_once_and_counted_steps_read_as_counts():
    job = services.start_job(
        services.create_job(User.objects.create_user("counter"), "c", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    )
    task_id = str(uuid.uuid4())
    relay = Relay(job, task_id)
    progress.reporter(worker._redis(), task_id)("correctness", {"trial": 3, "of": 5})
    relay.poll()
    assert step_of(job) == "checking correctness 3/5"
    services.set_step(job.pk, "turn 2: evaluating")
    relay.poll()  # the same report again: not handed on a second time
    assert step_of(job) == "turn 2: evaluating"


def test_the_sandbox_can_say_it_waits_too():
    """sandbox.protocol's exclusive wait (progress("device_wait")) reads the same words."""
    assert progress.step_text("device_wait", {}) == "waiting for the device (another evaluation is being timed)"


def test_a_value_that_is_not_a_report_is_no_progress():
    """The sender reads the key as it finds it: anything but a report is ignored, never an error."""
    assert progress.read(None) is None and progress.read(b"") is None
    assert progress.read(b"not json") is None and progress.read(b"[3, 5]") is None
    assert progress.read(b'{"n": 2, "step": "timing", "detail": {}}') == (2, "timing", {})


def test_a_wait_for_device_memory_has_its_own_words():
    """sandbox.protocol's memory admission (progress("memory_wait"), sandbox.devmem) says what it waits for."""
    assert progress.step_text("memory_wait", {}) == "waiting for device memory (other evaluations hold it)"
