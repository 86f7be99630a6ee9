"""The Celery app. Workers start with `celery -A webapp.celery:app worker -Q <queue>`.

Configuration comes from the Django settings (the CELERY_* names), queues and routes from
webapp/queues.py. Tasks are found in each installed app's `tasks` module. Every task's base is
DeliveryLimitedTask: a task whose worker died under it MAX_DELIVERIES times is not run again.

Worker signals (issue 20): a pool process dies with its worker's main process (PR_SET_PDEATHSIG),
so a killed worker's evaluation stops with it; a running compile or gpu task refreshes a liveness
key in Redis (webapp.queues.alive_key) that its sender watches; an agent worker runs the
monitor of webapp.jobs.scheduler (its slots, lost jobs, the fair dispatch).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading

from celery import Celery, Task, signals

from webapp.queues import (
    ALIVE_EVERY_S,
    ALIVE_TTL_S,
    MAX_DELIVERIES,
    Queue,
    alive_key,
    count_delivery,
    forget_deliveries,
    queue_for_task,
    worker_died_reason,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
logger = logging.getLogger(__name__)


class WorkerDiedTooOften(RuntimeError):
    """A task stopped because the worker running it died on each of its deliveries."""


_redis_clients: dict[str, object] = {}


def redis_client(url: str):
    """One client (a connection pool) per URL and process; it reconnects by itself after Redis restarts."""
    if url not in _redis_clients:
        import redis

        _redis_clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return _redis_clients[url]


_redis = redis_client


class DeliveryLimitedTask(Task):
    """Counts each delivery of the task (webapp/queues.py says why); past MAX_DELIVERIES it calls
    `on_worker_died_too_often(*args, **kwargs)` instead of running. A task sets its own with
    `@shared_task(..., on_worker_died_too_often=function)`, the function taking (task, *args,
    **kwargs) and returning the task's result; the default raises WorkerDiedTooOften.

    Plain calls (`task(...)`, no message) are not counted. A Redis error while counting is
    logged and the task runs: the broker being down must not fail tasks already delivered."""

    def on_worker_died_too_often(self, *args, **kwargs):
        raise WorkerDiedTooOften(worker_died_reason("task"))

    def __call__(self, *args, **kwargs):
        request = self.request
        if request.called_directly or not request.id:
            return super().__call__(*args, **kwargs)
        # In a worker (or apply()) the request is already pushed: call run() directly, as Celery's
        # own __call__ would push a second, empty one.
        client = self._delivery_counter()
        retries = request.retries or 0
        deliveries = None
        if client is not None:
            try:
                ttl = 2 * int(self.app.conf.broker_transport_options.get("visibility_timeout", 3600)) + 3600
                deliveries = count_delivery(client, request.id, retries, ttl)
            except Exception:  # see the docstring
                logger.exception("task %s[%s]: could not count its deliveries", self.name, request.id)
        if deliveries is not None and deliveries > MAX_DELIVERIES:
            logger.error(
                "task %s[%s] delivered %d times, its worker died on each of the %d before: not run again",
                self.name,
                request.id,
                deliveries,
                MAX_DELIVERIES,
            )
            try:
                return self.on_worker_died_too_often(*args, **kwargs)
            finally:
                self._forget(client, request.id, retries)
        try:
            return self.run(*args, **kwargs)
        finally:
            if deliveries is not None:
                self._forget(client, request.id, retries)

    def _delivery_counter(self):
        url = self.app.conf.broker_url or ""
        if self.request.is_eager or not url.startswith(("redis://", "rediss://", "unix://")):
            return None
        return _redis(url)

    def _forget(self, client, task_id: str, retries: int) -> None:
        try:
            forget_deliveries(client, task_id, retries)
        except Exception:  # the count expires by itself
            logger.warning("task %s[%s]: could not clear its delivery count", self.name, task_id)


app = Celery("kernelwright", task_cls=DeliveryLimitedTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
# Lazy: the modules load when the worker starts (or the app is finalised), after Django is set up.
app.autodiscover_tasks()
# `@shared_task` anywhere in the project binds to this app, in the web server as in workers.
app.set_default()


# -- worker signals --------------------------------------------------------------------------------
@signals.worker_process_init.connect
def _die_with_the_worker(**kwargs) -> None:
    """A pool process gets SIGKILL when the worker's main process dies: its task (an evaluation,
    whose sandbox children die with it) must not run on unseen, reporting progress."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the prctl
        os._exit(1)


_alive: dict[str, threading.Event] = {}


@signals.task_prerun.connect
def _start_alive(task_id=None, task=None, **kwargs) -> None:
    if task is None or task.request.called_directly or queue_for_task(task.name) not in (Queue.COMPILE, Queue.GPU):
        return
    stop = threading.Event()
    _alive[task_id] = stop
    url = app.conf.broker_url or ""
    if not url.startswith(("redis://", "rediss://")):
        return

    def refresh() -> None:
        while True:
            try:
                redis_client(url).set(alive_key(task_id), os.getpid(), ex=ALIVE_TTL_S)
            except Exception:  # Redis restarting: the next refresh sets it again
                pass
            if stop.wait(ALIVE_EVERY_S):
                return

    threading.Thread(target=refresh, name=f"alive-{task_id}", daemon=True).start()


@signals.task_postrun.connect
def _stop_alive(task_id=None, **kwargs) -> None:
    stop = _alive.pop(task_id, None)
    if stop is None:
        return
    stop.set()
    try:
        redis_client(app.conf.broker_url).delete(alive_key(task_id))
    except Exception:  # it expires
        pass


_monitor = None


@signals.worker_ready.connect
def _start_monitor(sender=None, **kwargs) -> None:
    """An agent worker's main process watches for lost jobs and dispatches queued ones."""
    global _monitor
    queues = set(getattr(app.amqp.queues, "consume_from", None) or {})
    if Queue.AGENT.value not in queues or _monitor is not None:
        return
    from webapp.jobs.scheduler import Monitor

    concurrency = int(getattr(getattr(sender, "controller", None), "concurrency", 0) or 1)
    _monitor = Monitor(getattr(sender, "hostname", None) or "agent", concurrency).start()


@signals.worker_shutdown.connect
def _stop_monitor(**kwargs) -> None:
    if _monitor is not None:
        _monitor.stop()
