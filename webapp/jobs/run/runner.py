"""One job's agent run on the agent queue: build the policy and the Celery evaluator, store each
turn as it completes, honour cancel between turns, and resume from stored turns after a lost
worker. A job asking for backend "auto" first asks a gpu worker what that is there
(CeleryEvaluator.backend): the policy writes code for the backend its evaluations will run on.
The job's step is written from here alone: the loop's tool calls, and the gpu worker's progress
that the evaluator relays (webapp.jobs.run.progress).

Turn storage: the loop reports events one by one (on_event); a turn is stored when the next
turn starts or the run ends, so every stored turn is complete and a worker that dies mid-turn
loses only that unfinished turn, which the resumed run redoes.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from agent.events import Event, event_from_dict
from agent.loop import Budgets, run
from agent.policy import TaskInfo
from agent.trajectory import Trajectory
from sandbox.options import SANDBOX_OPTION_KEYS
from webapp.jobs import scheduler, services
from webapp.jobs.models import Job, Turn
from webapp.jobs.run.sender import CeleryEvaluator, NoBackend
from webapp.queues import worker_died_reason

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = scheduler.MAX_ATTEMPTS  # starts of one job (first run + resumes after lost workers)
TOOL_STEPS = {"compile": "compiling", "evaluate": "evaluating", "profile": "profiling"}


class TurnRecorder:
    """Groups the loop's events per turn and stores each turn once it is complete."""

    def __init__(self, job: Job, attempt: int | None = None) -> None:
        self.job = job
        self.attempt = attempt  # stores and steps count only while this attempt owns the job
        self.stored: dict[int, list[dict[str, Any]]] = {
            t.index: list(t.events) for t in Turn.objects.filter(job=job).order_by("index")
        }
        self.current: int | None = None
        self.pending: list[dict[str, Any]] = []

    def on_event(self, event: Event) -> None:
        data = event.to_dict()
        turn = int(data.get("turn") or 0)
        if data["type"] == "task" and any(e.get("type") == "task" for e in self.stored.get(0, [])):
            return  # a resumed loop announcing the task again
        if self.current is not None and turn != self.current:
            self.flush()
        if turn in self.stored and self.current is None:
            # A late event for a turn already stored (e.g. `finished`): store it again, extended.
            self.stored[turn].append(data)
            services.store_turn(self.job, turn, self.stored[turn], attempt=self.attempt)
            return
        self.current = turn
        self.pending.append(data)
        self._step(data)

    def _step(self, data: dict[str, Any]) -> None:
        kind = data["type"]
        turn = data.get("turn")
        if kind == "turn_started":
            services.set_step(self.job.pk, f"turn {turn}: waiting for the policy", self.attempt)
        elif kind == "tool_call" and data.get("name") in TOOL_STEPS:
            services.set_step(self.job.pk, f"turn {turn}: {TOOL_STEPS[data['name']]}", self.attempt)

    def flush(self) -> None:
        if self.current is None:
            return
        events = self.stored.get(self.current, []) + self.pending
        services.store_turn(self.job, self.current, events, attempt=self.attempt)
        self.stored[self.current] = events
        self.current, self.pending = None, []

    def history(self) -> list[Event]:
        return [event_from_dict(e) for index in sorted(self.stored) for e in self.stored[index]]


def build_policy(options: dict[str, Any]) -> Any:
    """The built-in policy unless the job asks for the model and an endpoint is configured."""
    base_url = getattr(settings, "OPENAI_BASE_URL", "") or ""
    if options.get("policy") == "openai" and base_url:
        from agent.openai_policy import OpenAIPolicy

        return OpenAIPolicy(
            base_url=base_url,
            api_key=getattr(settings, "OPENAI_API_KEY", "") or "none",
            model=settings.KERNELWRIGHT_MODEL,
        )
    try:
        from agent.builtin import BuiltinPolicy
    except ImportError as exc:
        raise RuntimeError(f"the built-in policy is not available ({exc}) and no model endpoint is configured") from exc
    return BuiltinPolicy()


def _cancel_requested(job_id: int) -> bool:
    return Job.objects.filter(pk=job_id, cancel_requested=True).exists()


def run_job(job_id: int) -> None:
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.is_terminal:
        return
    if job.cancel_requested:
        services.finish_job(job, Job.State.CANCELLED, "cancelled before it started")
        return
    if job.attempts >= MAX_ATTEMPTS:
        # Started that often and never finished: each worker running it died (the delivery
        # count in Redis usually stops the task first; this holds even when that count is gone).
        stop_lost_job(job_id)
        return
    claimed = scheduler.claim(job_id)
    if claimed is None:
        # A live attempt holds it (a redelivered message of a worker thought lost), or it ended.
        logger.info(
            "job %s: not claimed (a live attempt holds it, or it has ended): this delivery does nothing", job_id
        )
        return
    job = services.started(claimed)
    attempt = job.attempts
    recorder = TurnRecorder(job, attempt)
    with scheduler.Heartbeat(job_id, attempt) as heartbeat:
        try:
            finished = _run_loop(job, recorder, attempt > 1, attempt, heartbeat)
        except NoBackend as exc:
            if not heartbeat.lost:
                services.finish_job(job, Job.State.FAILED, str(exc))
            return
        except Exception as exc:  # any failure must end the job with a reason
            if heartbeat.lost:
                return  # another attempt owns the job now
            logger.exception("job %s failed", job_id)
            recorder.flush()
            services.finish_job(job, Job.State.FAILED, f"internal error: {type(exc).__name__}: {exc}")
            return
        if heartbeat.lost:
            logger.warning("job %s: attempt %s was superseded; it stops without finishing the job", job_id, attempt)
            return
        recorder.flush()
        _finish_from_trajectory(job, finished)


def stop_lost_job(job_id: int) -> None:
    """End a job whose worker died on each of its starts (the upload killed it, say)."""
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and not job.is_terminal:
        logger.error("job %s: %s", job_id, worker_died_reason("job"))
        services.finish_job(job, Job.State.FAILED, worker_died_reason("job"))


def _run_loop(
    job: Job,
    recorder: TurnRecorder,
    resumed: bool,
    attempt: int | None = None,
    heartbeat: scheduler.Heartbeat | None = None,
) -> Any:
    evaluator = CeleryEvaluator(job.pk, attempt=attempt, owner_id=job.owner_id)
    if job.options.get("backend", "auto") == "auto":
        job = services.record_backend(job, evaluator.backend(), attempt)
    sandbox_options = {k: job.options[k] for k in SANDBOX_OPTION_KEYS if k in job.options}
    task = TaskInfo(
        name=job.name,
        source=job.source,
        backend=job.options["backend"],
        options=sandbox_options,
        task_hash=job.task_hash,
    )
    history = recorder.history()
    trajectory = Trajectory(history) if (resumed and history) else None
    return run(
        task,
        build_policy(job.options),
        evaluator,
        Budgets(max_turns=int(job.options.get("max_turns", 10))),
        on_event=recorder.on_event,
        stop_requested=lambda: (heartbeat is not None and heartbeat.lost) or _cancel_requested(job.pk),
        trajectory=trajectory,
    )


def _finished_event(job: Job) -> dict[str, Any] | None:
    for turn in Turn.objects.filter(job=job).order_by("-index"):
        for e in reversed(turn.events):
            if e.get("type") == "finished":
                return e
    return None


def _finish_from_trajectory(job: Job, result: Any) -> None:
    job.refresh_from_db()
    fin = _finished_event(job) or {}
    reason = fin.get("reason", "")
    summary = fin.get("summary", "")
    if reason == "stopped" or job.cancel_requested:
        services.finish_job(job, Job.State.CANCELLED, "cancelled by the user", summary)
    elif reason == "error":
        services.finish_job(job, Job.State.FAILED, summary or "the agent stopped on an error", summary)
    elif job.best_reward is not None and job.best_reward >= 1:
        services.finish_job(job, Job.State.SUCCEEDED, _reason_words(reason), summary)
    else:
        services.finish_job(
            job, Job.State.FAILED, f"no correct candidate found ({_reason_words(reason) or 'run ended'})", summary
        )


def _reason_words(reason: str) -> str:
    return {
        "model_finished": "the policy finished",
        "max_turns": "turn budget used up",
        "max_tokens": "token budget used up",
        "max_wall_time": "time budget used up",
        "max_cost": "cost budget used up",
    }.get(reason, reason)
