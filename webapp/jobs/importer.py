"""Trajectory JSON in, a read-only job out: for runs made elsewhere (the CLI, another server)
and for the gallery's case studies. The file is parsed with the agent's own parser, so anything
that is not a valid `kernelwright.trajectory/1` file is refused with the parser's message."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.events import BestChanged, FileEdit
from agent.trajectory import Trajectory, TrajectoryFormatError
from agent.workspace import WorkspaceError, check_path
from webapp.jobs import services
from webapp.jobs.models import Job, task_hash
from webapp.jobs.turns import group_by_turn

MAX_IMPORT_BYTES = 20 * 1024 * 1024


class ImportRefused(ValueError):
    pass


MAX_DEPTH = 100  # a trajectory nests about 8 deep; copying events (dataclasses.asdict) recurses per level


def _nested_deeper_than(data: Any, limit: int) -> bool:
    """Without recursion: whether any value of `data` lies more than `limit` lists or objects deep."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def parse(data: Any) -> Trajectory:
    if not isinstance(data, dict):
        raise ImportRefused("a trajectory file is a JSON object with `schema` and `events`")
    if _nested_deeper_than(data, MAX_DEPTH):
        raise ImportRefused(f"not a valid trajectory: it nests more than {MAX_DEPTH} lists or objects deep")
    try:
        traj = Trajectory.from_dict(data)
    except (TrajectoryFormatError, TypeError, ValueError, KeyError) as exc:
        raise ImportRefused(f"not a valid trajectory: {exc}") from exc
    for e in traj.events:
        _check_files(e)
    return traj


def _check_files(event: Any) -> None:
    """File names as a run's agent writes them (agent.workspace.check_path): relative, no `..`,
    plain segments. They become the downloads' names (best.zip), so nothing else is stored."""
    if isinstance(event, FileEdit):
        paths = [event.path]
    elif isinstance(event, BestChanged):
        if not isinstance(event.files, dict) or not all(isinstance(v, str) for v in event.files.values()):
            raise ImportRefused("not a valid trajectory: a best_changed event's files must map paths to text")
        paths = list(event.files)
    else:
        return
    for path in paths:
        try:
            if check_path(path) == path:
                continue
        except WorkspaceError as exc:
            raise ImportRefused(f"not a valid trajectory: file {exc}") from None
        raise ImportRefused(f"not a valid trajectory: file path {path!r} is not in its normal form")


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
        services.store_turn(job, index, events, notify=False)  # one notice below, not one per turn
    if into is not None:
        job.turns.exclude(index__in=list(turns)).delete()
        if best is None:
            services.clear_best(job)
    job.refresh_from_db()
    if into is not None:  # a page open on it fetches every turn again
        services.announce_state(job.pk, job.state)
    return job
