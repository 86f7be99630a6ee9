"""The one place for writes that push to clients: every change of a job or a turn that viewers
must see goes through a function here, which saves first and announces after the commit, so
nothing is ever announced that a page could not then fetch.

The agent run itself (building the policy and the Celery evaluator, storing turns as they
complete, cancel and resume) lives in webapp.jobs.run, which calls these; nothing here
imports the run's modules.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agent.loop import MAX_TURNS_LIMIT
from sandbox.options import BACKENDS, PRECISIONS, PRESETS, TORCH_OPS
from webapp.jobs import live, permissions
from webapp.jobs.models import Artifact, Job, Turn, task_hash
from webapp.jobs.notifications import JobNotification, Kind, announce
from webapp.jobs.task_check import check_task_source
from webapp.jobs.turns import evaluation_behind, summarize

logger = logging.getLogger(__name__)

can_view = permissions.can_view
can_change = permissions.can_change

POLICIES = ("builtin", "openai")
__all__ = ["BACKENDS", "MAX_TURNS_LIMIT", "PRESETS", "TORCH_OPS"]  # re-exported for the forms and the API


class InvalidJob(ValueError):
    """The task or options were rejected; `errors` says why, for the form or the API."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def normalize_options(raw: dict[str, Any] | None) -> dict[str, Any]:
    raw = dict(raw or {})
    errors: list[str] = []

    def pick(key: str, allowed: tuple[str, ...], default: str) -> str:
        value = str(raw.get(key) or default)
        if value not in allowed:
            errors.append(f"{key} must be one of {', '.join(allowed)}, not {value!r}")
        return value

    opts = {
        "backend": pick("backend", BACKENDS, "auto"),
        "policy": pick("policy", POLICIES, "builtin"),
        "preset": pick("preset", tuple(PRESETS), "default"),
        "torch_ops": pick("torch_ops", TORCH_OPS, "forbid"),
        "precision": pick("precision", PRECISIONS, "task"),
    }
    try:
        value = raw.get("max_turns")
        max_turns = 10 if value in (None, "") else int(value)
    except (TypeError, ValueError):
        errors.append("max_turns must be an integer")
        max_turns = 10
    if not 1 <= max_turns <= MAX_TURNS_LIMIT:
        errors.append(f"max_turns must be between 1 and {MAX_TURNS_LIMIT}")
    opts["max_turns"] = max_turns
    if errors:
        raise InvalidJob(errors)
    return opts


def celery_app():
    """The project's Celery app (webapp.celery), or the current one where it is not importable."""
    try:
        from webapp.celery import app  # type: ignore[import-not-found]

        return app
    except ImportError:
        from celery import current_app

        return current_app


def create_job(owner, name: str, source: str, options: dict[str, Any] | None = None, *, enqueue: bool = True) -> Job:
    check = check_task_source(source)
    if not check.ok:
        raise InvalidJob(check.errors)
    opts = normalize_options(options)
    job = Job.objects.create(
        owner=owner,
        name=(name or check.name or "untitled task")[:200],
        source=source,
        task_hash=task_hash(source),
        options=opts,
        scheduled=enqueue,
    )
    if enqueue:
        transaction.on_commit(dispatch_soon)
    return job


def dispatch_soon() -> None:
    """Hand queued jobs to the agent queue in the fair order (webapp.jobs.scheduler)."""
    from webapp.jobs.scheduler import dispatch_quietly

    dispatch_quietly()


def enqueue_job(job_id: int) -> None:
    """A queued job goes to the agent queue when the fair order and the free slots allow."""
    dispatch_soon()


def _after_commit(note: JobNotification) -> None:
    transaction.on_commit(lambda: announce(note))


def start_job(job: Job) -> Job:
    """Mark a job running (first start or resume after a lost worker). Workers claim jobs through
    webapp.jobs.scheduler.claim, which does the same only when no live attempt holds the job."""
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.RUNNING,
        attempts=F("attempts") + 1,
        step="starting",
        reason="",
        dispatched_at=None,
        updated_at=now,
    )  # no heartbeat: a job run by hand is never taken for lost
    return started(job)


def started(job: Job) -> Job:
    now = timezone.now()
    Job.objects.filter(pk=job.pk, started_at__isnull=True).update(started_at=now)
    job.refresh_from_db()
    _after_commit(JobNotification(Kind.STATE, job.pk, state=job.state))
    return job


def tell_waiting(job: Job, step: str, reason: str) -> None:
    """Where a queued job waits and why (the job page's step and reason). Announced as a state
    notice, after which the page fetches both."""
    step = step[:200]
    if (
        Job.objects.filter(pk=job.pk, state=Job.State.QUEUED)
        .exclude(step=step, reason=reason)
        .update(step=step, reason=reason, updated_at=timezone.now())
    ):
        _after_commit(JobNotification(Kind.STATE, job.pk, state=Job.State.QUEUED, reason=reason, step=step))


def announce_state(job_id: int, state: str, reason: str = "") -> None:
    _after_commit(JobNotification(Kind.STATE, job_id, state=state, reason=reason))


@transaction.atomic
def store_turn(
    job: Job, index: int, events: list[dict[str, Any]], attempt: int | None = None, *, notify: bool = True
) -> Turn | None:
    """Save one turn's events (idempotent per index), update the job's best, then announce. With
    `attempt`, only while that attempt owns the job (a superseded worker stores nothing). Without
    `notify` (an import storing every turn at once) nothing is announced: each announcement builds
    the update since the turn before, so announcing N turns would cost O(N^2)."""
    if attempt is not None and not Job.objects.select_for_update().filter(pk=job.pk, attempts=attempt).exists():
        logger.warning("job %s: turn %s of attempt %s not stored: a later attempt owns the job", job.pk, index, attempt)
        return None
    s = summarize(events)
    turn, _ = Turn.objects.update_or_create(
        job=job,
        index=index,
        defaults={
            "events": events,
            "reward": s.reward,
            "evaluation": s.evaluation,
            "speedup_eager": s.speedup_eager,
            "speedup_compile": s.speedup_compile,
            "speed": s.speed,
            "best_speedup_eager": s.best_speedup_eager,
            "has_error": s.has_error,
            "improved": s.improved,
            "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.completion_tokens,
            "cost_usd": s.cost_usd,
        },
    )
    Turn.objects.filter(pk=turn.pk).update(revision=F("revision") + 1)
    Job.objects.filter(pk=job.pk).update(updated_at=timezone.now())
    turn.refresh_from_db(fields=["revision"])
    if s.best is not None:
        _apply_best(job, s.best, events)
    if s.finished is not None and s.finished.get("best_version") is None:
        clear_best(job)  # the run ended without a verified candidate (its best failed the confirmation)
    if notify:
        transaction.on_commit(lambda: announce_turn(job.pk, index))
    return turn


def announce_turn(job_id: int, index: int) -> None:
    """After the commit: the notice carries the update since the turn before (rendered here once,
    and cached for the pages), so viewers that have every earlier turn need no fetch; the charts
    follow in a notice of their own, since reading them costs more than the rest and the turn need
    not wait for them. Should building fail, the bare notice goes out and pages fetch the turn."""
    try:
        job = Job.objects.get(pk=job_id)
        update = live.update(job, since=index - 1, with_charts=False)
    except Exception:  # the pages fetch it instead; never fail a store for it
        logger.exception("could not build the update of turn %s of job %s", index, job_id)
        announce(JobNotification(Kind.TURN_READY, job_id, turn=index))
        return
    announce(JobNotification(Kind.TURN_READY, job_id, turn=index, update=update))
    try:
        announce(JobNotification(Kind.CHARTS, job_id, turn=index, charts=live.charts_of(job)))
    except Exception:  # the next fetch or turn brings them
        logger.exception("could not build the charts of job %s after turn %s", job_id, index)


def best_evaluation(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The evaluation event the turn's last best_changed came from."""
    best_at = max((i for i, e in enumerate(events) if e.get("type") == "best_changed"), default=None)
    return None if best_at is None else evaluation_behind(events, best_at)


def _apply_best(job: Job, best: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """Store the job's result: the best's evaluation (its `final` one once confirmed) and the
    speedups taken from it, so Job.result() reads one stored evaluation."""
    version = best.get("version")
    found = best_evaluation(events)
    evaluation = (found or {}).get("result")
    source = evaluation if isinstance(evaluation, dict) else best
    Job.objects.filter(pk=job.pk).update(
        best_version=version,
        best_reward=source.get("reward", best.get("reward")),
        best_speedup_eager=source.get("speedup_vs_eager"),
        best_speedup_compile=source.get("speedup_vs_compile"),
        best_evaluation=evaluation,
        best_confirmed=(found or {}).get("purpose") == "final",
    )
    files = best.get("files") or {}
    if files:
        Artifact.objects.filter(job=job).delete()
        Artifact.objects.bulk_create(
            [
                Artifact(job=job, path=path, content=content, version=version or 0)
                for path, content in sorted(files.items())
            ]
        )


def clear_best(job: Job) -> None:
    if Job.objects.filter(pk=job.pk, best_version__isnull=False).update(
        best_version=None,
        best_reward=None,
        best_speedup_eager=None,
        best_speedup_compile=None,
        best_evaluation=None,
        best_confirmed=False,
    ):
        Artifact.objects.filter(job=job).delete()


def set_step(job_id: int, step: str, attempt: int | None = None) -> None:
    """What the worker is doing now ("compiling", "checking correctness 3/5", "timing"). With
    `attempt`, only while that attempt runs the job: progress of a lost attempt never shows."""
    step = step[:200]
    rows = Job.objects.filter(pk=job_id, state=Job.State.RUNNING)
    if attempt is not None:
        rows = rows.filter(attempts=attempt)
    changed = rows.exclude(step=step).update(step=step, updated_at=timezone.now())
    if changed:
        _after_commit(JobNotification(Kind.STEP, job_id, step=step))


def finish_job(job: Job, state: str, reason: str = "", summary: str = "") -> Job:
    if state not in Job.TERMINAL:
        raise ValueError(f"{state!r} is not a terminal state")
    Job.objects.filter(pk=job.pk).update(
        state=state,
        reason=reason[:10000],
        summary=summary or job.summary,
        step="",
        finished_at=timezone.now(),
        updated_at=timezone.now(),
        heartbeat_at=None,
        dispatched_at=None,  # no attempt lives on
    )
    job.refresh_from_db()
    _after_commit(JobNotification(Kind.STATE, job.pk, state=state, reason=job.reason))
    transaction.on_commit(dispatch_soon)  # a slot (and maybe a place in its owner's limit) is free
    return job


def cancel_job(job: Job) -> Job:
    """A queued job ends now; a running one is asked to stop (the loop checks between turns)."""
    if job.state == Job.State.QUEUED:
        return finish_job(job, Job.State.CANCELLED, "cancelled before it started")
    if job.state == Job.State.RUNNING:
        Job.objects.filter(pk=job.pk).update(cancel_requested=True, updated_at=timezone.now())
        job.refresh_from_db()
        _after_commit(JobNotification(Kind.STEP, job.pk, step="stopping after this turn"))
    return job


def retry_job(job: Job, owner=None) -> Job:
    """A failed or cancelled job runs again as a new job with the same task and options (the
    backend as asked for: "auto" is resolved again by the gpu workers of the new run)."""
    if job.state not in (Job.State.FAILED, Job.State.CANCELLED):
        raise InvalidJob([f"only a failed or cancelled job can be retried (this one is {job.state})"])
    name = job.name if job.name.endswith("(retry)") else f"{job.name} (retry)"
    options = {**job.options, "backend": job.options.get(REQUESTED_BACKEND) or job.options.get("backend")}
    return create_job(owner or job.owner, name, job.source, options)


REQUESTED_BACKEND = "requested_backend"  # the job's option as asked, once "backend" holds the resolved one


def record_backend(job: Job, backend: str, attempt: int | None = None) -> Job:
    """The backend the gpu workers resolved the job's "auto" to becomes its `backend` option (what
    the page and the API show), the request kept as `requested_backend`; with `attempt`, only
    while that attempt owns the job."""
    options = {**job.options, REQUESTED_BACKEND: job.options.get("backend", "auto"), "backend": backend}
    rows = Job.objects.filter(pk=job.pk)
    if attempt is not None:
        rows = rows.filter(attempts=attempt)
    job.options = options
    if rows.update(options=options, updated_at=timezone.now()):
        _after_commit(JobNotification(Kind.STATE, job.pk, state=job.state))
    return job


def set_visibility(job: Job, visibility: str) -> Job:
    if visibility not in Job.Visibility.values:
        raise InvalidJob([f"visibility must be one of {', '.join(Job.Visibility.values)}"])
    job.visibility = visibility
    job.save(update_fields=["visibility"])
    return job


def create_share_link(job: Job) -> str:
    token = job.new_share_token()
    job.save(update_fields=["share_token"])
    return token


def revoke_share_link(job: Job) -> None:
    job.share_token = None
    job.save(update_fields=["share_token"])
