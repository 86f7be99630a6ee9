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


# Every task's name, defined here once (webapp.jobs.tasks registers them, senders import them).
RUN_JOB_TASK = task_name(Queue.AGENT, "run_job")  # one job's agent loop
BUILD_TASK = task_name(Queue.COMPILE, "build")  # a candidate's build
EVALUATE_TASK = task_name(Queue.GPU, "evaluate")  # one evaluation for a job or /api/evaluate
PROFILE_TASK = task_name(Queue.GPU, "profile")
BACKEND_TASK = task_name(Queue.GPU, "backend")  # which backend a gpu worker resolves "auto" to
# A candidate of a batch posted to /api/evaluations (webapp.jobs.evaluations): evaluated, stored, announced.
EVALUATE_CANDIDATE_TASK = task_name(Queue.GPU, "evaluate_candidate")


def queue_for_task(name: str) -> Queue | None:
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] == TASK_PREFIX and parts[1] in Queue._value2member_map_:
        return Queue(parts[1])
    return None


def route_task(
    name: str, args: Any = None, kwargs: Any = None, options: Any = None, task: Any = None, **kw: Any
) -> dict | None:
    """Celery router (https://docs.celeryq.dev/en/stable/userguide/routing.html#routers)."""
    queue = queue_for_task(name)
    return {"queue": queue.value, "routing_key": queue.value} if queue else None


# -- a task whose worker dies ------------------------------------------------------------------
# acks_late + reject_on_worker_lost hand a task back to Redis when the process running it dies,
# and Redis delivers it again: a task that kills its worker (a hostile upload or candidate) would
# come back forever and block its queue. So every delivery of a task is counted in Redis (by
# webapp.celery.DeliveryLimitedTask, the base of every task), and a task delivered more than
# MAX_DELIVERIES times is not run again: it does what its `on_worker_died_too_often` says (the
# job fails, the evaluation returns an error result) or fails with WorkerDiedTooOften.
# Not Celery's own retry_on_worker_lost: that covers only a lost pool process (a dead worker's
# main process leaves its task unacknowledged, and Redis hands it back after the visibility
# timeout with the same retry count), and it fails the task in the worker's main process, where
# the job or evaluation cannot record why. Redis has no delivery count of its own (kombu marks a
# restored message only "redelivered"), hence the counter.
MAX_DELIVERIES = 3  # a first run and at most two more after its worker died
DELIVERY_KEY = "kernelwright:deliveries:{task_id}:{retries}"


# -- a task whose worker is gone without dying in front of Celery ------------------------------------
# A worker's main process killed (or a Redis restart) leaves its task unacknowledged, and Redis
# hands it back only after the visibility timeout (hours). So the sender watches instead
# (webapp.jobs.run.sender): a "sent" mark while the task waits, a liveness key refreshed
# by the process running it (webapp.celery), and an "abandoned" mark on a task given up and sent
# again, which a late redelivery of it obeys by returning at once.
def sent_key(task_id: str) -> str:
    return f"kernelwright:sent:{task_id}"


def alive_key(task_id: str) -> str:
    return f"kernelwright:alive:{task_id}"


def abandoned_key(task_id: str) -> str:
    return f"kernelwright:abandoned:{task_id}"


def progress_key(task_id: str) -> str:
    """A running evaluation's latest progress (webapp.jobs.run.progress)."""
    return f"kernelwright:progress:{task_id}"


ALIVE_EVERY_S = 5.0  # how often a running task refreshes its liveness key
ALIVE_TTL_S = 15  # the key expires this long after the last refresh


def worker_died_reason(what: str) -> str:
    """What a job, evaluation or task stopped this way says."""
    return f"the worker running this {what} died {MAX_DELIVERIES} times; the {what} was stopped"


def count_delivery(client: Any, task_id: str, retries: int, ttl_s: int) -> int:
    """This delivery's number (1 for the first) of a task, counted in Redis. The count lives
    `ttl_s` after the latest delivery: longer than a task can wait to be delivered again."""
    key = DELIVERY_KEY.format(task_id=task_id, retries=retries)
    with client.pipeline() as pipe:
        count, _ = pipe.incr(key).expire(key, ttl_s).execute()
    return int(count)


def forget_deliveries(client: Any, task_id: str, retries: int) -> None:
    """The task ran to its end (whatever it returned or raised): no later delivery to count."""
    client.delete(DELIVERY_KEY.format(task_id=task_id, retries=retries))


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

    hard = {
        Queue.AGENT.value: agent_time_limit,
        Queue.COMPILE.value: compile_time_limit,
        Queue.GPU.value: gpu_time_limit,
    }
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
        # A lost Redis connection (Redis restarting) must not kill the tasks running: an agent run
        # or an evaluation goes on and its result is stored once Redis is back (the backend
        # retries). Its acknowledgement may be lost with the old connection; the message then
        # comes back after the visibility timeout and is dropped (a job's claim, an abandoned or
        # finished task's marks).
        "CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS": False,
        "CELERY_RESULT_BACKEND_ALWAYS_RETRY": True,
        "CELERY_RESULT_BACKEND_MAX_RETRIES": 60,
        "CELERY_RESULT_BACKEND_MAX_SLEEP_BETWEEN_RETRIES_MS": 2000,
        # Redis redelivers a task not acknowledged within the visibility timeout: it must exceed the
        # longest task, or a long agent run would be started a second time while still running.
        # https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
        # Priorities (the gpu queue's fair order between users, webapp.jobs.scheduler): the Redis
        # transport keeps a list per step and serves the lowest number first.
        "CELERY_BROKER_TRANSPORT_OPTIONS": {
            "visibility_timeout": max(hard.values()) + 3600,
            "priority_steps": [0, 3, 6, 9],
        },
        "CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP": True,
        # JSON only, never pickle, in both directions (issue 16): a worker or the web server must
        # not run code that someone able to write to Redis put into a message or a result.
        "CELERY_TASK_SERIALIZER": "json",
        "CELERY_RESULT_SERIALIZER": "json",
        "CELERY_EVENT_SERIALIZER": "json",
        "CELERY_ACCEPT_CONTENT": ["json"],
        "CELERY_RESULT_ACCEPT_CONTENT": ["json"],
        "CELERY_RESULT_EXPIRES": 24 * 3600,
        "CELERY_RESULT_EXTENDED": True,
        "CELERY_TASK_TRACK_STARTED": True,
    }
