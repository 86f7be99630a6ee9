"""Trajectory JSON in, a read-only job out: for runs made elsewhere (the CLI, another server)
and for the gallery's case studies. The file is parsed with the agent's own parser, so anything
that is not a valid `kernelwright.trajectory/1` file is refused with the parser's message."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.trajectory import Trajectory, TrajectoryFormatError
from webapp.jobs import services
from webapp.jobs.models import Job, task_hash
from webapp.jobs.turns import group_by_turn

MAX_IMPORT_BYTES = 20 * 1024 * 1024


class ImportRefused(ValueError):
    pass


def parse(data: Any) -> Trajectory:
    if not isinstance(data, dict):
        raise ImportRefused("a trajectory file is a JSON object with `schema` and `events`")
    try:
        return Trajectory.from_dict(data)
    except (TrajectoryFormatError, TypeError, ValueError, KeyError) as exc:
        raise ImportRefused(f"not a valid trajectory: {exc}") from exc


@transaction.atomic
def import_trajectory(
    owner,
    data: Any,
    *,
    origin: str = Job.Origin.IMPORTED,
    gallery: bool = False,
    name: str = "",
    into: Job | None = None,
) -> Job:
    """A new read-only job from the trajectory, or with `into` that job updated in place (same id,
    so the same URL: the gallery's case studies), its turns replaced by the trajectory's."""
    traj = parse(data)
    task = traj.task()
    if task is None:
        raise ImportRefused("the trajectory has no `task` event, so there is no reference module to show")
    fin = traj.finished()
    best = traj.best()
    state = Job.State.SUCCEEDED if best is not None and best.reward >= 1 else Job.State.FAILED
    fields = dict(
        owner=owner,
        name=(name or task.name or "imported trajectory")[:200],
        source=task.source,
        task_hash=task.task_hash or task_hash(task.source),
        options={
            **(task.options or {}),
            "backend": task.backend or (task.options or {}).get("backend", ""),
            "policy": task.policy,
        },
        origin=origin,
        gallery=gallery,
        visibility=Job.Visibility.PUBLIC if gallery else Job.Visibility.PRIVATE,
        state=state,
        reason=f"imported ({fin.reason})" if fin else "imported (the run did not finish)",
        summary=fin.summary if fin else "",
        finished_at=timezone.now(),
    )
    if into is None:
        job = Job.objects.create(**fields)
    else:
        job = into
        for key, value in fields.items():
            setattr(job, key, value)
        job.save()
    turns = group_by_turn(e.to_dict() for e in traj.events)
    for index, events in turns.items():
        services.store_turn(job, index, events)
    if into is not None:
        job.turns.exclude(index__in=list(turns)).delete()
        if best is None:
            services.clear_best(job)
    job.refresh_from_db()
    return job
