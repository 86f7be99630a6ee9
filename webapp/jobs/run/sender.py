"""The agent loop's evaluator in the web app: the same three calls as agent.evaluator.LocalEvaluator,
sent through Celery so that builds run on the `compile` queue and evaluations on the `gpu` queue.

Results come back as the JSON form the worker sent and go to the loop as they came (the loop's
tools rebuild the dataclass once). A result that does not come back in time becomes a `timeout`
result (the loop records it like any candidate fault) rather than an exception that would end
the job. While it waits, the gpu worker's progress (webapp.jobs.run.progress) is relayed to the
call's on_progress, or shown as the job's step.

Waiting survives Redis and workers going away: the result is polled (a Redis error is waited
out), and a task is known lost when its worker's liveness key (webapp.celery, refreshed every few
seconds while the task runs) or, before it started, its "sent" mark is gone for LOST_GRACE_S; it
is then marked abandoned (a late redelivery of it returns at once) and sent again, at most
MAX_DELIVERIES times in all, after which the build or evaluation fails saying why. Evaluations
and profiles take a place in their user's fair share of the gpu queue (webapp.jobs.scheduler).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout
from celery.utils import uuid

from webapp.jobs import scheduler, services
from webapp.jobs.run import outcomes, progress
from webapp.queues import (
    BACKEND_TASK,
    BUILD_TASK,
    EVALUATE_TASK,
    MAX_DELIVERIES,
    PROFILE_TASK,
    abandoned_key,
    alive_key,
    progress_key,
    sent_key,
)

logger = logging.getLogger(__name__)

POLL_S = 0.2
LOST_GRACE_S = 20.0  # a running task's liveness key (refreshed every 5 s) missing this long: its worker is gone
LOST = object()
# How long the agent waits for each kind of task, queueing included (more than the queue's time limit).
WAIT_S = {"compile": 900.0, "evaluate": 1800.0, "profile": 1800.0, "backend": 1800.0}


class NoBackend(RuntimeError):
    """No gpu worker said which backend it evaluates on: the job cannot start its policy."""


Progress = Callable[[str, dict[str, Any]], None]


class CeleryEvaluator:
    def __init__(
        self,
        job_id: int | None = None,
        app: Any = None,
        timeouts: dict[str, float] | None = None,
        attempt: int | None = None,
        owner_id: Any = None,
    ) -> None:
        self.job_id, self.attempt, self.owner_id = job_id, attempt, owner_id
        self.app = app or services.celery_app()
        self.timeouts = {**WAIT_S, **(timeouts or {})}

    def _tell(self, step: str) -> None:
        """The job's step (only while this evaluator's attempt runs it)."""
        if self.job_id is not None:
            services.set_step(self.job_id, step, self.attempt)

    def _show_progress(self, step: str, detail: dict[str, Any]) -> None:
        self._tell(progress.step_text(step, detail))

    def _call(self, name: str, what: str, kwargs: dict[str, Any], on_progress: Progress | None = None) -> Any:
        """The task's result; None when it did not come back in time; LOST when its worker died
        under each of MAX_DELIVERIES sends. The task's progress goes to `on_progress` meanwhile."""
        deadline = time.monotonic() + self.timeouts[what]
        gpu = name != BUILD_TASK
        kwargs = {**kwargs, "attempt": self.attempt}
        for delivery in range(1, MAX_DELIVERIES + 1):
            task_id = uuid()
            priority = None
            if gpu:
                priority = self._retrying(
                    functools.partial(
                        scheduler.reserve_gpu_slot,
                        self.owner_id,
                        task_id,
                        wait=True,
                        on_wait=self._tell,
                        deadline=deadline,
                    ),
                    deadline,
                )
            try:
                self._retrying(functools.partial(self._send, name, kwargs, task_id, priority, deadline), deadline)
                outcome = self._wait(task_id, deadline, on_progress)
            finally:
                if gpu:
                    scheduler.release_gpu_slot(self.owner_id, task_id)
            if outcome is not LOST:
                return outcome
            logger.warning(
                "job %s: the worker running %s %s died (send %d of %d)",
                self.job_id,
                what,
                task_id,
                delivery,
                MAX_DELIVERIES,
            )
            self._retrying(functools.partial(self._abandon, task_id, int(self.timeouts[what]) + 7 * 3600), deadline)
        return LOST

    def _abandon(self, task_id: str, ttl_s: int) -> None:
        self._redis().set(abandoned_key(task_id), 1, ex=ttl_s)

    def _redis(self) -> Any:
        from webapp.celery import redis_client

        return redis_client(self.app.conf.broker_url)

    def _send(self, name: str, kwargs: dict[str, Any], task_id: str, priority: int | None, deadline: float) -> None:
        self._redis().set(sent_key(task_id), 1, ex=int(max(60, deadline - time.monotonic())) + 600)
        self.app.send_task(
            name,
            kwargs=kwargs,
            task_id=task_id,
            priority=priority,
            retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
        )

    @staticmethod
    def _retrying(call: Callable[[], Any], deadline: float) -> Any:
        """`call()`, again every second while Redis does not answer (until the deadline)."""
        while True:
            try:
                return call()
            except Exception as exc:  # only connection trouble is waited out
                if not _is_connection_error(exc) or time.monotonic() > deadline:
                    raise
                logger.warning("Redis does not answer (%s): trying again", type(exc).__name__)
                time.sleep(1.0)

    def _wait(self, task_id: str, deadline: float, on_progress: Progress | None = None) -> Any:
        backend = self.app.backend
        missing_since: float | None = None
        seen = 0  # the number of the last progress report handed on
        while time.monotonic() < deadline:
            try:
                meta = backend.get_task_meta(task_id)
                state = meta.get("status")
                if state == "SUCCESS":
                    return meta.get("result")
                if state in ("FAILURE", "REVOKED"):
                    raise backend.exception_to_python(meta.get("result"))
                with self._redis().pipeline(transaction=False) as pipe:
                    pipe.exists(alive_key(task_id) if state == "STARTED" else sent_key(task_id))
                    pipe.get(progress_key(task_id))
                    present, raw = pipe.execute()
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                time.sleep(1.0)  # Redis restarting: the task may well be running on
                continue
            seen = self._relay(raw, seen, on_progress)
            if present:
                missing_since = None
            elif missing_since is None:
                missing_since = time.monotonic()
            elif time.monotonic() - missing_since > LOST_GRACE_S:
                return LOST
            time.sleep(POLL_S)
        try:
            self.app.AsyncResult(task_id).revoke()
        except Exception:
            pass
        return None

    def _relay(self, raw: Any, seen: int, on_progress: Progress | None) -> int:
        """Hand a new progress report on (to the call's on_progress, else the job's step)."""
        report = progress.read(raw)
        if report is None or report[0] <= seen:
            return seen
        number, step, detail = report
        (on_progress or self._show_progress)(step, detail)
        return number

    def compile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
        """The build's result in its JSON form (sandbox.schema.CompileResult.to_dict())."""
        data = self._call(BUILD_TASK, "compile", {"files": files, "options": options, "job_id": self.job_id})
        if data is LOST:
            return outcomes.worker_died_build()
        if data is None:
            return outcomes.build_timed_out(self.timeouts["compile"])
        return data

    def evaluate(
        self, task_source: str, files: dict[str, str], options: dict[str, Any], on_progress: Progress | None = None
    ) -> dict[str, Any]:
        """The evaluation's result in its JSON form (sandbox.schema.EvalResult.to_dict())."""
        return self._evaluation(EVALUATE_TASK, "evaluate", "evaluation", task_source, files, options, on_progress)

    def profile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
        return self._evaluation(PROFILE_TASK, "profile", "profile", task_source, files, options)

    def _evaluation(
        self,
        name: str,
        what: str,
        words: str,
        task_source: str,
        files: dict[str, str],
        options: dict[str, Any],
        on_progress: Progress | None = None,
    ) -> dict[str, Any]:
        kwargs = {"task_source": task_source, "files": files, "options": options, "job_id": self.job_id}
        data = self._call(name, what, kwargs, on_progress)
        if data is LOST:
            return outcomes.worker_died_result()
        if data is None:
            return outcomes.timed_out(words, self.timeouts[what])
        return data

    def backend(self) -> str:
        """The backend a gpu worker resolves "auto" to (webapp.jobs.run.worker.host_backend):
        asked once per job, where the evaluations will run, before the policy writes code for it."""
        data = self._call(BACKEND_TASK, "backend", {"job_id": self.job_id})
        if data is LOST or data is None:
            why = "its worker died" if data is LOST else f"none answered within {self.timeouts['backend']:.0f} s"
            raise NoBackend(f"no gpu worker said which backend it evaluates on ({why})")
        return str(data)


def _is_connection_error(exc: BaseException) -> bool:
    import kombu.exceptions
    import redis

    return isinstance(
        exc,
        redis.exceptions.ConnectionError
        | redis.exceptions.TimeoutError
        | ConnectionError
        | kombu.exceptions.OperationalError
        | CeleryTimeout,
    )
