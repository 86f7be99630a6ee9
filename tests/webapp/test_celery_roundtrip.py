"""Celery: each queue's ping travels through the real Redis to a real worker of that queue."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.stack import QUEUE_WORKER_NAMES
from webapp.celery import app
from webapp.core.tasks import PING_TASKS
from webapp.queues import Queue


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("queue", list(Queue), ids=str)
def test_ping_round_trips_through_a_worker_of_its_own_queue(queue: Queue, live_workers) -> None:
    reply = PING_TASKS[queue].delay(payload=f"hello {queue}").get(timeout=60)

    assert reply["payload"] == f"hello {queue}"
    assert reply["queue"] == queue.value
    assert reply["worker"].split("@", 1)[0] == QUEUE_WORKER_NAMES[queue.value]
    # It ran in a pool process of that queue's worker subprocess, not here.
    assert reply["pid"] != os.getpid()
    assert parent_pid(reply["pid"]) == live_workers[queue.value].proc.pid


def test_gpu_worker_on_a_host_without_gpu_uses_the_cpu_backend(live_workers) -> None:
    reply = PING_TASKS[Queue.GPU].delay().get(timeout=60)
    assert reply["backend_requested"] == "cpu"


@pytest.mark.parametrize(
    ("name", "queue"),
    [
        ("kernelwright.agent.run_job", "agent"),
        ("kernelwright.compile.build", "compile"),
        ("kernelwright.gpu.evaluate", "gpu"),
        ("kernelwright.gpu.profile.deep", "gpu"),
        ("kernelwright.unknown.thing", "compile"),
        ("othertool.agent.x", "compile"),
    ],
)
def test_task_names_route_to_their_queue(name: str, queue: str) -> None:
    route = app.amqp.router.route({}, name)
    assert route["queue"].name == queue


def test_tasks_carry_their_queue_time_limits_and_visibility_outlasts_them() -> None:
    assert PING_TASKS[Queue.AGENT].time_limit == settings.CELERY_AGENT_TIME_LIMIT
    assert PING_TASKS[Queue.COMPILE].time_limit == settings.CELERY_COMPILE_TIME_LIMIT
    assert PING_TASKS[Queue.GPU].time_limit == settings.CELERY_GPU_TIME_LIMIT
    for task in PING_TASKS.values():
        assert 0 < task.soft_time_limit < task.time_limit
    longest = max(t.time_limit for t in PING_TASKS.values())
    assert app.conf.broker_transport_options["visibility_timeout"] > longest


def test_every_job_task_is_named_for_its_queue_and_handed_back_when_its_worker_dies() -> None:
    import webapp.jobs.tasks  # noqa: F401 - registers the tasks on the app
    from webapp import queues

    names = [
        queues.RUN_JOB_TASK,
        queues.BUILD_TASK,
        queues.EVALUATE_TASK,
        queues.PROFILE_TASK,
        queues.BACKEND_TASK,
        queues.EVALUATE_CANDIDATE_TASK,
    ]
    for name in names:
        task = app.tasks[name]
        assert (task.acks_late, task.reject_on_worker_lost) == (True, True), name
        assert queues.queue_for_task(name) is not None, name


def test_long_task_settings_are_on() -> None:
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.broker_url.startswith("redis://")
    assert app.conf.result_backend.startswith("redis://")
