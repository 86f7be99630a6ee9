"""Celery tasks of jobs: thin wrappers that unpack arguments and call one plain function.

Names route the work (webapp.queues): `kernelwright.agent.*` runs on the agent queue,
`kernelwright.compile.*` on compile hosts, `kernelwright.gpu.*` on one worker per GPU.
The agent task is acks_late + reject_on_worker_lost: if its worker dies, the broker hands the
job to another worker, which resumes it from the turns already stored. A task whose worker died
under it webapp.queues.MAX_DELIVERIES times is not run again (webapp.celery.DeliveryLimitedTask):
the job fails, the build or evaluation returns a failed result saying so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from celery import shared_task

from webapp.queues import EVALUATE_CANDIDATE_TASK


def _stop_job(task, job_id: int) -> None:
    from webapp.jobs.runner import stop_lost_job

    stop_lost_job(job_id)


def _failed_build(task, *args, **kwargs) -> dict[str, Any]:
    from webapp.jobs.worker_side import worker_died_build

    return worker_died_build()


def _failed_evaluation(task, *args, **kwargs) -> dict[str, Any]:
    from webapp.jobs.worker_side import worker_died_result

    return worker_died_result()


@shared_task(name="kernelwright.agent.run_job", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             on_worker_died_too_often=_stop_job)
def run_job(job_id: int) -> None:
    from webapp.jobs.runner import run_job as _run

    _run(job_id)


@shared_task(name="kernelwright.compile.build", acks_late=True, reject_on_worker_lost=True,
             on_worker_died_too_often=_failed_build, bind=True)
def build(self, files: dict[str, str], options: dict[str, Any], job_id: int | None = None,
          attempt: int | None = None) -> dict[str, Any]:
    from agent.evaluator import LocalEvaluator
    from webapp.jobs.worker_side import unwanted, worker_died_build

    why = unwanted(self.request.id, job_id, attempt)
    if why:
        return {**worker_died_build(), "log": why}
    result = LocalEvaluator().compile("", files, options)
    return dataclasses.asdict(result)


@shared_task(name="kernelwright.gpu.evaluate", acks_late=True, reject_on_worker_lost=True,
             on_worker_died_too_often=_failed_evaluation, bind=True)
def evaluate(self, task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None = None,
             attempt: int | None = None) -> dict[str, Any]:
    from webapp.jobs.worker_side import evaluate_for_job

    return evaluate_for_job(task_source, files, options, job_id, attempt, self.request.id)


@shared_task(name="kernelwright.gpu.profile", acks_late=True, reject_on_worker_lost=True,
             on_worker_died_too_often=_failed_evaluation, bind=True)
def profile(self, task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None = None,
            attempt: int | None = None) -> dict[str, Any]:
    from webapp.jobs.worker_side import profile_for_job

    return profile_for_job(task_source, files, options, job_id, attempt, self.request.id)


def _failed_candidate(task, evaluation_id: int, *args, **kwargs) -> None:
    from webapp.jobs.evaluations import worker_died

    worker_died(evaluation_id)


@shared_task(name=EVALUATE_CANDIDATE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             on_worker_died_too_often=_failed_candidate, bind=True)
def evaluate_candidate(self, evaluation_id: int) -> None:
    """One candidate of a batch posted to /api/evaluations; the outcome is stored on its row."""
    from webapp.jobs.evaluations import run

    run(evaluation_id, self.request.id)
