"""Who may see or change a job: one function each, used by pages, the API and the websocket.

A job is private to its owner unless it is public (or in the gallery) or the visitor holds its
current share token; staff see everything. Only the owner (or staff) changes a job; a share
link is read-only.
"""

from __future__ import annotations

import secrets

from webapp.jobs.models import Job


def can_view(user, job: Job, share_token: str | None = None) -> bool:
    if job.visibility == Job.Visibility.PUBLIC or job.gallery:
        return True
    if share_token and job.share_token and secrets.compare_digest(str(share_token), job.share_token):
        return True
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    return bool(user.is_staff or (job.owner_id is not None and job.owner_id == user.pk))


def can_change(user, job: Job) -> bool:
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    return bool(user.is_staff or (job.owner_id is not None and job.owner_id == user.pk))


def visible_jobs(user):
    """The jobs a signed-in user lists: their own (all of them for staff)."""
    if user.is_staff:
        return Job.objects.all()
    return Job.objects.filter(owner=user)
