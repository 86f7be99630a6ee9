"""Bulk export of jobs as training data: the export page and GET /api/export.

Both take the same filters (task, minimum best reward, created since/until, visibility, only
mine) and answer with a file of agent.export rows (JSON Lines, or parquet when pyarrow is
installed). A caller only ever gets jobs they may see (webapp.jobs.permissions.can_view): their
own (every job for staff), public ones and the gallery.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime, time

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import render

from agent import export as datasets
from agent.trajectory import Trajectory
from webapp.jobs.models import Job
from webapp.jobs.permissions import can_view
from webapp.jobs.turns import trajectory_dict
from webapp.jobs.views.api import api_view, error

FILE_TYPES = {"jsonl": "application/jsonl", "parquet": "application/vnd.apache.parquet"}
VISIBILITIES = ("any", Job.Visibility.PRIVATE.value, Job.Visibility.PUBLIC.value)


def max_jobs() -> int:
    return int(settings.KERNELWRIGHT_EXPORT_MAX_JOBS)


class BadQuery(ValueError):
    pass


@dataclass
class ExportQuery:
    """The export's parameters, parsed once for the page and the API."""

    format: str = "sft"
    file: str = "jsonl"
    task: str = ""
    min_reward: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    visibility: str = "any"
    mine: bool = False

    @classmethod
    def parse(cls, params) -> ExportQuery:
        q = cls(
            format=params.get("format") or "sft",
            file=params.get("file") or "jsonl",
            task=(params.get("task") or "").strip(),
            visibility=params.get("visibility") or "any",
            mine=params.get("mine") in ("1", "true", "on"),
        )
        if q.format not in datasets.FORMATS:
            raise BadQuery(f"format must be one of {', '.join(datasets.FORMATS)}")
        if q.file not in FILE_TYPES:
            raise BadQuery(f"file must be one of {', '.join(FILE_TYPES)}")
        if q.visibility not in VISIBILITIES:
            raise BadQuery(f"visibility must be one of {', '.join(VISIBILITIES)}")
        if params.get("min_reward") not in (None, ""):
            try:
                q.min_reward = int(params["min_reward"])
            except ValueError as exc:
                raise BadQuery("min_reward must be an integer (-1, 1, 2 or 3)") from exc
        q.since = _day(params.get("since"), "since", time.min)
        q.until = _day(params.get("until"), "until", time.max)
        return q


def _day(text: str | None, name: str, at: time) -> datetime | None:
    """An ISO date (the whole day) or date-time, in UTC."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadQuery(f"{name} must be an ISO date such as 2026-11-30") from exc
    if len(text) <= 10:
        value = datetime.combine(value.date(), at)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def exportable(user) -> Q:
    """Jobs this user may see without a share link: the same rule as can_view."""
    shown = Q(visibility=Job.Visibility.PUBLIC) | Q(gallery=True)
    if user is None or not user.is_authenticated:
        return shown
    return Q() if user.is_staff else shown | Q(owner=user)


def select_jobs(user, q: ExportQuery):
    jobs = Job.objects.filter(exportable(user))
    if q.mine:
        jobs = jobs.filter(owner=user) if user is not None and user.is_authenticated else jobs.none()
    if q.task:
        jobs = jobs.filter(Q(name__icontains=q.task) | Q(task_hash__startswith=q.task))
    if q.min_reward is not None:
        jobs = jobs.filter(best_reward__gte=q.min_reward)
    if q.since:
        jobs = jobs.filter(created_at__gte=q.since)
    if q.until:
        jobs = jobs.filter(created_at__lte=q.until)
    if q.visibility != "any":
        jobs = jobs.filter(visibility=q.visibility)
    return jobs.order_by("created_at", "pk")


def runs(user, jobs):
    for job in jobs.iterator():
        if not can_view(user, job):
            continue  # never: select_jobs follows can_view; kept as the check that decides
        traj = Trajectory.from_dict(trajectory_dict(t.events for t in job.turns.order_by("index")))
        yield datasets.Run(traj, f"job:{job.pk}", {"job": job.pk, "visibility": job.visibility})


def export_response(user, q: ExportQuery) -> HttpResponse:
    jobs = select_jobs(user, q)
    count = jobs.count()
    if count > max_jobs():
        raise BadQuery(
            f"{count} jobs match, more than {max_jobs()} in one file (KERNELWRIGHT_EXPORT_MAX_JOBS): "
            "narrow the filters (task, since/until, min_reward)"
        )
    rows = datasets.rows(runs(user, jobs), q.format)
    if q.file == "parquet":
        try:
            body, n = datasets.parquet_bytes(rows)
        except datasets.ExportError as exc:
            raise BadQuery(str(exc)) from exc
    else:
        buf = io.StringIO()
        n = datasets.write_jsonl(rows, buf)
        body = buf.getvalue().encode()
    resp = HttpResponse(body, content_type=FILE_TYPES[q.file])
    resp["Content-Disposition"] = f'attachment; filename="kernelwright-{q.format}.{q.file}"'
    resp["X-Kernelwright-Rows"] = str(n)
    resp["X-Kernelwright-Jobs"] = str(count)
    return resp


@api_view(("GET",), auth_required=False)
def api_export(request):
    """GET /api/export?format=sft|rl&file=jsonl|parquet&task=&min_reward=&since=&until=&visibility=&mine=1"""
    try:
        return export_response(request.api_user, ExportQuery.parse(request.GET))
    except BadQuery as exc:
        return error(400, str(exc))


@login_required
def export_page(request):
    """The form; submitting it (GET with `download`) returns the file."""
    problem = ""
    if "download" in request.GET:
        try:
            return export_response(request.user, ExportQuery.parse(request.GET))
        except BadQuery as exc:
            problem = str(exc)
    try:
        import pyarrow  # noqa: F401

        parquet = True
    except ImportError:
        parquet = False
    return render(
        request,
        "jobs/export.html",
        {
            "problem": problem,
            "parquet": parquet,
            "formats": datasets.FORMATS,
            "visibilities": VISIBILITIES,
            "query": request.GET,
        },
        status=400 if problem else 200,
    )
