"""The Celery queues, named for the kind of work, and how a task finds its queue.

A task's queue follows from its name: `kernelwright.<queue>.<what>` (for example
`kernelwright.gpu.evaluate` runs on the `gpu` queue). Time limits follow from the queue too,
unless a task sets its own. No Django import here: the settings module and the launcher use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

TASK_PREFIX = "kernelwright"


class Queue(StrEnum):
    AGENT = "agent"  # the agent loop of one job: long, mostly waiting on the other two queues
    COMPILE = "compile"  # builds of candidate kernels: CPU only, short
    GPU = "gpu"  # evaluations and profiles: one worker per GPU (the cpu backend on a host without one)


# Tasks whose names fit no queue (third-party tasks, say) go here: short CPU work.
DEFAULT_QUEUE = Queue.COMPILE


def task_name(queue: Queue, name: str) -> str:
    """The registered name of a task on `queue`: `task_name(Queue.GPU, "evaluate")`."""
    return f"{TASK_PREFIX}.{Queue(queue).value}.{name}"


def queue_for_task(name: str) -> Queue | None:
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] == TASK_PREFIX and parts[1] in Queue._value2member_map_:
        return Queue(parts[1])
    return None


def route_task(name: str, args: Any = None, kwargs: Any = None, options: Any = None, task: Any = None, **kw: Any) -> dict | None:
    """Celery router (https://docs.celeryq.dev/en/stable/userguide/routing.html#routers)."""
    queue = queue_for_task(name)
    return {"queue": queue.value, "routing_key": queue.value} if queue else None


@dataclass(frozen=True)
class QueueTimeLimits:
    """A Celery task annotation: hard and soft time limits by queue, for tasks that set none.

    The soft limit raises SoftTimeLimitExceeded inside the task a little before the hard limit
    kills it, so a task can record why it stopped.
    """

    hard: dict[str, int]
    grace: int = 60

    def annotate(self, task: Any) -> dict | None:
        queue = queue_for_task(getattr(task, "name", "") or "")
        if queue is None or getattr(task, "time_limit", None) is not None:
            return None
        hard = self.hard[queue.value]
        return {"time_limit": hard, "soft_time_limit": max(1, hard - min(self.grace, hard // 10))}


def celery_queue_settings(agent_time_limit: int, compile_time_limit: int, gpu_time_limit: int) -> dict[str, Any]:
    """The CELERY_* Django settings for queues, routing, reliability and limits."""
    from kombu import Queue as KombuQueue

    hard = {Queue.AGENT.value: agent_time_limit, Queue.COMPILE.value: compile_time_limit, Queue.GPU.value: gpu_time_limit}
    return {
        "CELERY_TASK_QUEUES": [KombuQueue(q.value, routing_key=q.value) for q in Queue],
        "CELERY_TASK_DEFAULT_QUEUE": DEFAULT_QUEUE.value,
        "CELERY_TASK_ROUTES": (route_task,),
        "CELERY_TASK_ANNOTATIONS": (QueueTimeLimits(hard=hard),),
        # Long tasks: acknowledge after the task finishes, so a worker that dies mid-task hands the
        # task back instead of losing it; take one task at a time so none waits behind a long one.
        "CELERY_TASK_ACKS_LATE": True,
        "CELERY_TASK_REJECT_ON_WORKER_LOST": True,
        "CELERY_WORKER_PREFETCH_MULTIPLIER": 1,
        "CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS": True,
        # Redis redelivers a task not acknowledged within the visibility timeout: it must exceed the
        # longest task, or a long agent run would be started a second time while still running.
        # https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
        "CELERY_BROKER_TRANSPORT_OPTIONS": {"visibility_timeout": max(hard.values()) + 3600},
        "CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP": True,
        "CELERY_TASK_SERIALIZER": "json",
        "CELERY_RESULT_SERIALIZER": "json",
        "CELERY_ACCEPT_CONTENT": ["json"],
        "CELERY_RESULT_EXPIRES": 24 * 3600,
        "CELERY_RESULT_EXTENDED": True,
        "CELERY_TASK_TRACK_STARTED": True,
    }
