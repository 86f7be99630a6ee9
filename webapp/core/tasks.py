"""One `ping` task per queue: the smallest real round trip through Redis and a worker.

Each is named `kernelwright.<queue>.ping`, so the name alone routes it (webapp/queues.py); the
reply says which worker and queue ran it, so a test can tell a misrouted task from a routed one.
"""

from __future__ import annotations

import os
import socket

from celery import shared_task

from webapp.queues import Queue, task_name


def pong(task, payload: str) -> dict:
    delivery = task.request.delivery_info or {}
    return {
        "payload": payload,
        "worker": task.request.hostname,
        "queue": delivery.get("routing_key"),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "backend_requested": os.environ.get("KERNELWRIGHT_BACKEND", "auto"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


@shared_task(bind=True, name=task_name(Queue.AGENT, "ping"))
def ping_agent(self, payload: str = "") -> dict:
    return pong(self, payload)


@shared_task(bind=True, name=task_name(Queue.COMPILE, "ping"))
def ping_compile(self, payload: str = "") -> dict:
    return pong(self, payload)


@shared_task(bind=True, name=task_name(Queue.GPU, "ping"))
def ping_gpu(self, payload: str = "") -> dict:
    return pong(self, payload)


PING_TASKS = {Queue.AGENT: ping_agent, Queue.COMPILE: ping_compile, Queue.GPU: ping_gpu}
