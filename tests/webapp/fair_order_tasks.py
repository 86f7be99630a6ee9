"""A test-only Celery task that records the order in which a worker takes messages (loaded into
a worker of a queue of its own with `celery worker -I tests.webapp.fair_order_tasks`)."""

from __future__ import annotations

import redis
from celery import shared_task

QUEUE = "kwtest-fair"


@shared_task(name="kwtest.fair.record", bind=True)
def record(self, order_key: str, label: str) -> None:
    client = redis.Redis.from_url(self.app.conf.broker_url)
    try:
        client.rpush(order_key, label)
    finally:
        client.close()
