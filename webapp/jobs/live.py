"""What a live job page is told: the update after turn `since` (the new turns' HTML, the job's
state, totals and chart data), built in one place for both ways it travels.

- Pushed: right after a turn is stored (and committed), `services.store_turn` builds the update
  since the turn before it once, in the storing process, and the "turn ready" notice carries it
  (webapp.jobs.notifications); a page that has every earlier turn shows it without a fetch. The
  charts follow in a notice of their own.
- Fetched: GET /jobs/<id>/updates/?since=N answers the same thing for any N, from the database,
  so a page that missed a notice (a reconnect, a reload, a gap) catches up on every stored turn.

A failed job's reason, said first (`failure_reason`), lives here because the live state shows it
too; the job page's header uses the same function.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Sum

from webapp.jobs import charts
from webapp.jobs.models import Job, Turn
from webapp.jobs.task_check import error_that_matters
from webapp.jobs.turn_html import turns_html


def turns_after(job: Job, since: int = -1) -> list[Turn]:
    return list(job.turns.filter(index__gt=since).order_by("index"))


def turn_summaries(job: Job) -> list[Turn]:
    """Turns without their events: enough for the timeline and the charts."""
    return list(job.turns.defer("events", "evaluation").order_by("index"))


def totals(job: Job) -> dict:
    t = job.turns.aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"), cost=Sum("cost_usd"))
    return {"prompt_tokens": t["prompt"] or 0, "completion_tokens": t["completion"] or 0, "cost_usd": t["cost"] or 0.0}


def head_key(job: Job) -> str:
    """What the header, actions and best card show: when it changes, the page fetches them again."""
    return f"{job.state}|{job.best_version}|{job.best_reward}|{job.best_speedup_eager}|{job.best_confirmed}|{job.cancel_requested}"


def live_state(job: Job) -> dict:
    return {
        "state": job.state,
        "step": job.step,
        "reason": failure_reason(job),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "best_reward": job.best_reward,
        "best_speedup_eager": job.best_speedup_eager,
        "best_speedup_compile": job.best_speedup_compile,
        "result": result.to_dict() if (result := job.result()) else None,
        "cancel_requested": job.cancel_requested,
        "head_key": head_key(job),
    }


def update(job: Job, since: int, with_charts: bool = True) -> dict[str, Any]:
    """Every turn after `since` (escaped HTML, rendered once per stored revision and cached), the
    live state, the totals and, when there are new turns, the charts (`charts_of`; left out with
    `with_charts=False`, where they follow on their own). The same for every viewer: nothing in it
    depends on who asks (the header with its actions is fetched per viewer)."""
    turns = turns_after(job, since)
    return {
        "html": str(turns_html(turns)),
        "last_index": turns[-1].index if turns else since,
        "live": live_state(job),
        "totals": totals(job),
        "charts": charts_of(job) if turns and with_charts else None,
    }


def charts_of(job: Job) -> dict[str, Any]:
    return charts.job_charts(job, turn_summaries(job))


# -- a failed job's reason, said first ------------------------------------------------------------
NO_CANDIDATE = "no correct candidate found ("  # the runner's words when none passed (runner._finish_from_trajectory)
UNSAID = ("", "no verified candidate")  # a summary that says no more than NO_CANDIDATE (agent.loop's default)


def failure_reason(job: Job) -> str:
    """The header's line under the state, in one line. A failed job's stored reason may only say
    that nothing passed ("no correct candidate found (the policy finished)") or be a traceback;
    the line leads with what went wrong instead: the policy's closing words (the run's summary),
    else the last failed evaluation's first reason, a traceback cut to its root cause
    (agent.module_task.error_that_matters), with the budget that ended the run when one did."""
    reason = error_that_matters(job.reason)
    if job.state != Job.State.FAILED or not reason.startswith(NO_CANDIDATE):
        return reason
    why = error_that_matters(job.summary) if job.summary.strip() not in UNSAID else ""
    why = why or last_evaluation_reason(job)
    if not why:
        return reason
    ended = reason.removeprefix(NO_CANDIDATE).rstrip(")")
    return why if ended in ("", "the policy finished", "run ended") else f"{why} ({ended})"


def last_evaluation_reason(job: Job) -> str:
    """The first reason of the newest evaluation that failed, in one line ("" when none did)."""
    for evaluation in job.turns.exclude(evaluation=None).order_by("-index").values_list("evaluation", flat=True):
        if evaluation.get("status") not in (None, "ok") and evaluation.get("reasons"):
            return error_that_matters(str(evaluation["reasons"][0]))
    return ""
