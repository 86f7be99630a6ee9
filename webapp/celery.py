"""The Celery app. Workers start with `celery -A webapp.celery:app worker -Q <queue>`.

Configuration comes from the Django settings (the CELERY_* names), queues and routes from
webapp/queues.py. Tasks are found in each installed app's `tasks` module. Every task's base is
DeliveryLimitedTask: a task whose worker died under it MAX_DELIVERIES times is not run again.
"""

from __future__ import annotations

import logging
import os

from celery import Celery, Task

from webapp.queues import MAX_DELIVERIES, count_delivery, forget_deliveries, worker_died_reason

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
logger = logging.getLogger(__name__)


class WorkerDiedTooOften(RuntimeError):
    """A task stopped because the worker running it died on each of its deliveries."""


_redis_clients: dict[str, object] = {}


def _redis(url: str):
    if url not in _redis_clients:
        import redis

        _redis_clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return _redis_clients[url]


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
            except Exception:  # noqa: BLE001 - see the docstring
                logger.exception("task %s[%s]: could not count its deliveries", self.name, request.id)
        if deliveries is not None and deliveries > MAX_DELIVERIES:
            logger.error("task %s[%s] delivered %d times, its worker died on each of the %d before: not run again",
                         self.name, request.id, deliveries, MAX_DELIVERIES)
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
        except Exception:  # noqa: BLE001 - the count expires by itself
            logger.warning("task %s[%s]: could not clear its delivery count", self.name, task_id)


app = Celery("kernelwright", task_cls=DeliveryLimitedTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
# Lazy: the modules load when the worker starts (or the app is finalised), after Django is set up.
app.autodiscover_tasks()
# `@shared_task` anywhere in the project binds to this app, in the web server as in workers.
app.set_default()
