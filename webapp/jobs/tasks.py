"""Celery tasks of jobs: thin wrappers that unpack arguments and call one plain function.

Names route the work (webapp.queues): `kernelwright.agent.*` runs on the agent queue,
`kernelwright.compile.*` on compile hosts, `kernelwright.gpu.*` on one worker per GPU.
The agent task is acks_late + reject_on_worker_lost: if its worker dies, the broker hands the
job to another worker, which resumes it from the turns already stored.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from celery import shared_task


@shared_task(name="kernelwright.agent.run_job", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_job(job_id: int) -> None:
    from webapp.jobs.runner import run_job as _run

    _run(job_id)


@shared_task(name="kernelwright.compile.build", acks_late=True, reject_on_worker_lost=True)
def build(files: dict[str, str], options: dict[str, Any], job_id: int | None = None) -> dict[str, Any]:
    from agent.evaluator import LocalEvaluator

    result = LocalEvaluator().compile("", files, options)
    return dataclasses.asdict(result)


@shared_task(name="kernelwright.gpu.evaluate", acks_late=True, reject_on_worker_lost=True)
def evaluate(task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None = None) -> dict[str, Any]:
    from webapp.jobs.worker_side import evaluate_for_job

    return evaluate_for_job(task_source, files, options, job_id)


@shared_task(name="kernelwright.gpu.profile", acks_late=True, reject_on_worker_lost=True)
def profile(task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None = None) -> dict[str, Any]:
    from webapp.jobs.worker_side import profile_for_job

    return profile_for_job(task_source, files, options, job_id)
