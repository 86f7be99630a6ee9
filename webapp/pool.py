"""The gpu worker pool: which worker ran each evaluation and when, and batches of evaluations.

Why this exists: a host runs one `gpu` worker per GPU (CUDA_VISIBLE_DEVICES pinned, concurrency
1), and every timing number is only trustworthy if no other evaluation ran on that GPU at the same
time. Celery's result keeps the worker's name and the end time, but not the start, so each worker
records a `TaskRun` (worker, CUDA_VISIBLE_DEVICES, pid, start, end) for every gpu-queue task
through Celery's task signals. Workers import this module at start (`CELERY_INCLUDE` in
webapp/settings.py), so the record exists for every evaluation of every deployment, and
`sharing_violations` can check a set of runs after the fact (tests, benchmarks, an audit).

`evaluate_batch` sends several candidates of one job at once, so that N gpu workers evaluate them
in parallel, and returns the results in the order of the candidates.

No Django import at module level: the worker imports this before Django's apps are ready.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from celery.signals import task_postrun, task_prerun

from webapp.queues import EVALUATE_TASK, Queue, task_name

logger = logging.getLogger(__name__)

GPU_TASK_PREFIX = task_name(Queue.GPU, "")
RUN_KEY = "kernelwright:pool:run:{task_id}"
RUN_TTL_S = 7 * 24 * 3600


@dataclass
class TaskRun:
    """One gpu-queue task as its worker saw it. Times are the worker host's wall clock (epoch
    seconds): comparable between workers of one host, which is all a GPU-sharing check needs."""

    task_id: str
    task: str
    worker: str  # Celery node name, "gpu1@host"
    cuda_visible_devices: str  # the worker's pinning; "" on the cpu backend
    backend: str  # the worker's KERNELWRIGHT_BACKEND (as configured; "auto" is resolved per evaluation)
    pid: int  # the pool process that ran it
    started: float
    finished: float | None = None
    state: str = "STARTED"  # Celery's state after the task: SUCCESS, FAILURE, ...
    # The device the evaluation itself ran on, from its result (EvalResult.device_id: "gpu-<UUID>"
    # as the sandbox child's torch saw it, or "cpu"): the pinning says where it should run, this
    # says where it did. "" when the task returned no result (a failure) or is not an evaluation.
    device_id: str = ""

    @property
    def node(self) -> str:
        return self.worker.split("@", 1)[0]

    @property
    def host(self) -> str:
        return self.worker.split("@", 1)[1] if "@" in self.worker else ""

    @property
    def devices(self) -> frozenset[str]:
        return frozenset(d.strip() for d in self.cuda_visible_devices.split(",") if d.strip())

    @property
    def seconds(self) -> float | None:
        return None if self.finished is None else self.finished - self.started

    def overlaps(self, other: TaskRun) -> bool:
        """Half-open intervals [started, finished): a run still going (no end yet) never ended."""
        a_end = self.finished if self.finished is not None else float("inf")
        b_end = other.finished if other.finished is not None else float("inf")
        return self.started < b_end and other.started < a_end

    def shares_device_with(self, other: TaskRun) -> bool:
        """Same worker, or one host's GPU visible to both (two workers pinned to one GPU is a
        misconfiguration this catches). cpu-backend workers share only with themselves."""
        if self.worker == other.worker:
            return True
        return self.host == other.host and bool(self.devices & other.devices)


def sharing_violations(runs: Iterable[TaskRun], per_device: int = 1) -> list[tuple[TaskRun, ...]]:
    """Groups of `per_device + 1` runs that overlapped in time on one worker or one GPU: must be
    empty. With the default 1 these are pairs (one evaluation per GPU). Workers started with
    `--evals-per-gpu N` run up to N evaluations on a GPU at once; their timed loops must still
    never overlap, which the results show (sandbox.devlock.overlapping_windows)."""
    runs = list(runs)
    return [
        group
        for group in combinations(runs, per_device + 1)
        if all(a.shares_device_with(b) and a.overlaps(b) for a, b in combinations(group, 2))
    ]


# --- the record, written by the worker ------------------------------------------------------------

_clients: dict[str, Any] = {}


def _redis(url: str):
    import redis

    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return client


def _store_url(app) -> str:
    return str(app.conf.result_backend or app.conf.broker_url)


def _write(app, task_id: str, fields: dict[str, Any]) -> None:
    key = RUN_KEY.format(task_id=task_id)
    client = _redis(_store_url(app))
    client.hset(key, mapping={k: json.dumps(v) for k, v in fields.items()})
    client.expire(key, RUN_TTL_S)


@task_prerun.connect
def _record_start(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task is None or not task_id or not str(getattr(task, "name", "")).startswith(GPU_TASK_PREFIX):
        return
    try:
        hostname = getattr(task.request, "hostname", None) or f"unknown@{socket.gethostname()}"
        _write(
            task.app,
            task_id,
            {
                "task_id": task_id,
                "task": task.name,
                "worker": hostname,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "backend": os.environ.get("KERNELWRIGHT_BACKEND", ""),
                "pid": os.getpid(),
                "started": time.time(),
            },
        )
    except Exception:  # the record must never fail an evaluation
        logger.exception("could not record the start of %s", task_id)


@task_postrun.connect
def _record_end(
    task_id: str | None = None, task: Any = None, state: str | None = None, retval: Any = None, **_: Any
) -> None:
    if task is None or not task_id or not str(getattr(task, "name", "")).startswith(GPU_TASK_PREFIX):
        return
    try:
        device = retval.get("device_id", "") if isinstance(retval, dict) else ""
        _write(task.app, task_id, {"finished": time.time(), "state": state or "", "device_id": str(device or "")})
    except Exception:
        logger.exception("could not record the end of %s", task_id)


def task_runs(task_ids: Sequence[str], app=None, wait: float = 10.0) -> list[TaskRun | None]:
    """The recorded run of each task id, in order; None where none was recorded.

    Celery stores a task's result before it sends task_postrun, so a caller that has just received
    the last result may read that run before its end is written: wait up to `wait` seconds for
    every run to have an end. (The recorded end is thus a few milliseconds after the result, never
    before it: an interval that covers the work, and the pool process takes no other task until
    the record is written, so the overlap check stays conservative.)"""
    app = app or _default_app()
    client = _redis(_store_url(app))
    deadline = time.monotonic() + wait
    while True:
        pipe = client.pipeline()
        for task_id in task_ids:
            pipe.hgetall(RUN_KEY.format(task_id=task_id))
        out: list[TaskRun | None] = []
        for raw in pipe.execute():
            if not raw or b"started" not in raw:
                out.append(None)
                continue
            fields = {k.decode(): json.loads(v) for k, v in raw.items()}
            out.append(TaskRun(**fields))
        if all(r is not None and r.finished is not None for r in out) or time.monotonic() >= deadline:
            return out
        time.sleep(0.05)


def _default_app():
    from webapp.celery import app

    return app


# --- the pool as a client sees it -----------------------------------------------------------------


def live_workers(app=None, timeout: float = 1.0) -> set[str]:
    """Node names of the workers that answer a ping now ("gpu0@host", ...)."""
    app = app or _default_app()
    return set((app.control.inspect(timeout=timeout).ping() or {}).keys())


def wait_for_workers(nodes: Iterable[str], app=None, timeout: float = 90.0, alive=None) -> set[str]:
    """Until every node name in `nodes` ("gpu0", "compile", ...) answers a ping; `alive()` may
    raise to stop waiting early (a worker subprocess that exited)."""
    wanted = set(nodes)
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        seen = live_workers(app, timeout=0.5)
        if wanted <= {name.split("@", 1)[0] for name in seen}:
            return seen
        time.sleep(0.3)
    raise TimeoutError(f"workers {sorted(wanted)} did not all answer within {timeout:.0f} s (seen: {sorted(seen)})")


@dataclass
class BatchResult:
    """The results of one batch in the order of its candidates, and the Celery task ids (so the
    caller can fetch each evaluation's TaskRun: which worker and GPU, and when)."""

    results: list[Any]  # sandbox.schema.EvalResult
    task_ids: list[str]
    seconds: float  # wall time from sending the first to receiving the last


def evaluate_batch(
    task_source: str,
    candidates: Sequence[dict[str, str]],
    options: dict[str, Any],
    job_id: int | None = None,
    app=None,
    timeout: float = 1800.0,
) -> BatchResult:
    """Evaluate several candidates of one job at once: one gpu task each, sent together, so idle
    gpu workers take them in parallel (each worker still runs one at a time: concurrency 1,
    prefetch 1, acks late). Results come back in the order of `candidates`. A candidate whose
    result does not arrive before `timeout` (for the whole batch) gets a `timeout` result, as in
    CeleryEvaluator; an exception raised by the task itself (not a candidate fault) propagates."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from sandbox.schema import EvalResult, Status, Verdict

    app = app or _default_app()
    began = time.monotonic()
    sent = [
        app.send_task(
            EVALUATE_TASK, kwargs={"task_source": task_source, "files": files, "options": options, "job_id": job_id}
        )
        for files in candidates
    ]
    deadline = began + timeout
    results = []
    for async_result in sent:
        try:
            data = async_result.get(timeout=max(0.1, deadline - time.monotonic()), disable_sync_subtasks=False)
        except CeleryTimeout:
            async_result.revoke()
            results.append(
                EvalResult(
                    status=Status.TIMEOUT,
                    verdict=Verdict.FAIL,
                    reasons=[f"the evaluation did not come back from its worker within {timeout:.0f} s"],
                )
            )
            continue
        results.append(EvalResult.from_dict(data))
    return BatchResult(results=results, task_ids=[r.id for r in sent], seconds=time.monotonic() - began)


def run_table(runs: Iterable[TaskRun], origin: float | None = None) -> str:
    """A plain-text table of runs (worker, CUDA_VISIBLE_DEVICES, the device the evaluation reported,
    start and end in seconds from `origin`), for logs, test failures and docs. GPU UUIDs are cut
    to their first 8 hex digits, enough to tell a host's GPUs apart."""
    runs = sorted(runs, key=lambda r: r.started)
    if not runs:
        return "(no runs)"
    origin = runs[0].started if origin is None else origin
    lines = [f"{'worker':<28} {'CUDA_VISIBLE_DEVICES':<20} {'device':<12} {'start_s':>8} {'end_s':>8}  task_id"]
    for r in runs:
        end = f"{r.finished - origin:8.2f}" if r.finished is not None else "     ..."
        lines.append(
            f"{r.worker:<28} {r.cuda_visible_devices or '-':<20} {r.device_id[:12] or '-':<12} "
            f"{r.started - origin:8.2f} {end}  {r.task_id}"
        )
    return "\n".join(lines)
