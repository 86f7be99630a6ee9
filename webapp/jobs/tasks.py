"""Celery tasks of jobs: thin wrappers that unpack arguments and call one plain function of
webapp.jobs.run (the agent worker's runner, the compile and gpu workers' worker module). Each
imports its module when it first runs, so a compile or gpu worker never loads the agent loop.

Names come from webapp.queues and route the work: `kernelwright.agent.*` runs on the agent
queue, `kernelwright.compile.*` on compile hosts, `kernelwright.gpu.*` on one worker per GPU.
Every task is acks_late + reject_on_worker_lost (set for all tasks by webapp.queues): if its
worker dies, the broker hands it to another worker (a job resumes from the turns already
stored). A task whose worker died under it webapp.queues.MAX_DELIVERIES times is not run again
(webapp.celery.DeliveryLimitedTask): the job fails, the build or evaluation returns a failed
result saying so.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from webapp.queues import (
    BACKEND_TASK,
    BUILD_TASK,
    EVALUATE_CANDIDATE_TASK,
    EVALUATE_TASK,
    PROFILE_TASK,
    RUN_JOB_TASK,
)


def _stop_job(task: Any, job_id: int) -> None:
    from webapp.jobs.run.runner import stop_lost_job

    stop_lost_job(job_id)


def _failed_build(task: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    from webapp.jobs.run.outcomes import worker_died_build

    return worker_died_build()


def _failed_evaluation(task: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    from webapp.jobs.run.outcomes import worker_died_result

    return worker_died_result()


@shared_task(name=RUN_JOB_TASK, ignore_result=True, on_worker_died_too_often=_stop_job)
def run_job(job_id: int) -> None:
    from webapp.jobs.run.runner import run_job as _run

    _run(job_id)


@shared_task(name=BUILD_TASK, on_worker_died_too_often=_failed_build, bind=True)
def build(
    self: Any, files: dict[str, str], options: dict[str, Any], job_id: int | None = None, attempt: int | None = None
) -> dict[str, Any]:
    from webapp.jobs.run.worker import build_for_job

    return build_for_job(files, options, job_id, attempt, self.request.id)


@shared_task(name=EVALUATE_TASK, on_worker_died_too_often=_failed_evaluation, bind=True)
def evaluate(
    self: Any,
    task_source: str,
    files: dict[str, str],
    options: dict[str, Any],
    job_id: int | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    from webapp.jobs.run.worker import evaluate_for_job

    return evaluate_for_job(task_source, files, options, job_id, attempt, self.request.id)


@shared_task(name=PROFILE_TASK, on_worker_died_too_often=_failed_evaluation, bind=True)
def profile(
    self: Any,
    task_source: str,
    files: dict[str, str],
    options: dict[str, Any],
    job_id: int | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    from webapp.jobs.run.worker import profile_for_job

    return profile_for_job(task_source, files, options, job_id, attempt, self.request.id)


@shared_task(name=BACKEND_TASK)
def backend(job_id: int | None = None, attempt: int | None = None) -> str:
    """What this gpu worker resolves "auto" to (asked once per job, before its policy starts)."""
    from webapp.jobs.run.worker import host_backend

    return host_backend()


def _failed_candidate(task: Any, evaluation_id: int, *args: Any, **kwargs: Any) -> None:
    from webapp.jobs.evaluations import worker_died

    worker_died(evaluation_id)


@shared_task(name=EVALUATE_CANDIDATE_TASK, ignore_result=True, on_worker_died_too_often=_failed_candidate, bind=True)
def evaluate_candidate(self: Any, evaluation_id: int) -> None:
    """One candidate of a batch posted to /api/evaluations; the outcome is stored on its row."""
    from webapp.jobs.evaluations import run

    run(evaluation_id, self.request.id)
