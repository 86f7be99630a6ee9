"""Downloads: the best candidate as a zip, each of its files alone, and the trajectory JSON.
Shared by the pages and the API (the API wraps them with token authentication)."""

from __future__ import annotations

import json

from django.http import Http404, HttpResponse

from webapp.jobs.downloads import best_zip
from webapp.jobs.models import Job
from webapp.jobs.turns import trajectory_dict
from webapp.jobs.views.pages import job_view


def zip_response(job: Job) -> HttpResponse:
    resp = HttpResponse(best_zip(job), content_type="application/zip")
    resp["Content-Disposition"] = f'attachment; filename="kernelwright-job{job.pk}-best.zip"'
    return resp


def file_response(job: Job, path: str) -> HttpResponse:
    art = job.artifacts.filter(path=path).first()
    if art is None:
        raise Http404("no such file in the best candidate")
    resp = HttpResponse(art.content, content_type="text/plain; charset=utf-8")
    name = path.rsplit("/", 1)[-1].replace('"', "")
    resp["Content-Disposition"] = f'attachment; filename="{name}"'
    resp["X-Content-Type-Options"] = "nosniff"
    return resp


def trajectory_response(job: Job) -> HttpResponse:
    data = trajectory_dict(t.events for t in job.turns.order_by("index"))
    resp = HttpResponse(json.dumps(data, indent=1), content_type="application/json")
    resp["Content-Disposition"] = f'attachment; filename="kernelwright-job{job.pk}-trajectory.json"'
    return resp


@job_view()
def download_zip(request, job: Job):
    return zip_response(job)


@job_view()
def download_file(request, job: Job, path: str):
    return file_response(job, path)


@job_view()
def download_trajectory(request, job: Job):
    return trajectory_response(job)
