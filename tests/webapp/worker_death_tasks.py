"""Test-only Celery tasks that kill the worker process running them (loaded into a worker of a
queue of their own with `celery worker -I tests.webapp.worker_death_tasks`).

Each run appends its pid to a Redis list first, so a test can count how often a task really ran.
"""

from __future__ import annotations

import os
import signal

import redis
from celery import shared_task

QUEUE = "kwtest-deaths"


def record_run(task, runs_key: str) -> int:
    client = redis.Redis.from_url(task.app.conf.broker_url)
    try:
        return client.rpush(runs_key, os.getpid())
    finally:
        client.close()


@shared_task(bind=True, name="kwtest.deaths.die_until")
def die_until(self, runs_key: str, survive_on_run: int) -> str:
    """Kill this pool process (SIGKILL: no cleanup, no result) until run `survive_on_run`."""
    run = record_run(self, runs_key)
    if run < survive_on_run:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"survived run {run}"


def _stopped(task, runs_key: str, survive_on_run: int) -> dict:
    from webapp.queues import worker_died_reason

    return {"stopped": worker_died_reason("test task")}


@shared_task(bind=True, name="kwtest.deaths.die_until_with_hook", on_worker_died_too_often=_stopped)
def die_until_with_hook(self, runs_key: str, survive_on_run: int) -> str:
    return die_until.run(runs_key, survive_on_run)
