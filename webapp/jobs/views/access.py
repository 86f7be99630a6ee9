"""How every page and API view finds a job it may show or change (webapp.jobs.permissions decides).

A job the visitor may not see answers 404 (its existence is not revealed); an anonymous visitor
without a share token is sent to log in first, since the job may well be theirs.
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import Http404

from webapp.jobs.models import Job
from webapp.jobs.permissions import can_change, can_view


class LoginNeeded(Exception):
    pass


def share_token(request) -> str | None:
    return request.GET.get("share") or None


def viewable_job(request, job_id: int, user=None) -> Job:
    user = user if user is not None else request.user
    job = Job.objects.filter(pk=job_id).first()
    token = share_token(request)
    if job is not None and can_view(user, job, token):
        return job
    if not getattr(user, "is_authenticated", False) and not token:
        raise LoginNeeded
    raise Http404("no such job")


def changeable_job(request, job_id: int, user=None) -> Job:
    user = user if user is not None else request.user
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and can_change(user, job):
        return job
    if not getattr(user, "is_authenticated", False):
        raise LoginNeeded
    raise Http404("no such job")


def login_redirect(request):
    return redirect_to_login(request.get_full_path())
