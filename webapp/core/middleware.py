"""Many viewers of one job asking the same thing at the same moment cost one answer (issue 20).

After each stored turn every viewer's page fetches /jobs/<id>/updates/?since=N within a few
milliseconds of the others. The view caches its answer per (job, since, job.updated_at), but
fifty requests that all miss at once would all compute it. `CoalesceMiddleware` lets one request
per process compute an identical GET (same path, query and credentials) while the others wait,
then run: they find the answer cached. Permission is still checked by the view for each one.

Job pages, their update answers and turn fragments seen without an account (public jobs, share
links: the crowd) are also kept in the
shared cache, keyed by the URL and the job's access fields and `updated_at` (which every change
viewers see moves), read fresh for each request: a job made private or a revoked link is never
served from it, and a page is served from it only to a visitor the permission check admits.
Only responses that
set no cookie (no CSRF token in them) are kept; a request with a session or a token always runs
the view. It is the innermost middleware: every response still passes the others.
"""

from __future__ import annotations

import hashlib
import re
import threading

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse

COALESCE = [re.compile(r"^/jobs/\d+/updates/$"), re.compile(r"^/jobs/\d+/$"), re.compile(r"^/jobs/\d+/turns/\d+/html$")]
PAGE = re.compile(r"^/jobs/(\d+)/(?:updates/|turns/\d+/html)?$")  # each answer a function of the job's state
PAGE_TTL_S = 60
WAIT_S = 10.0  # a follower waits at most this long for the leader, then runs anyway

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            if len(_locks) > 10000:
                _locks.clear()
            lock = _locks[key] = threading.Lock()
        return lock


def _anonymous(request) -> bool:
    return settings.SESSION_COOKIE_NAME not in request.COOKIES and "HTTP_AUTHORIZATION" not in request.META


class CoalesceMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if request.method != "GET" or not any(p.match(request.path) for p in COALESCE):
            return self.get_response(request)
        page_key = None
        page = PAGE.match(request.path)
        if page and _anonymous(request):
            page_key = self._page_key(request, int(page.group(1)))
            hit = cache.get(page_key) if page_key else None
            if hit is not None:
                return self._cached(hit)
        who = request.META.get("HTTP_COOKIE", "") + "\0" + request.META.get("HTTP_AUTHORIZATION", "")
        lock = _lock_for(request.get_full_path() + "\0" + hashlib.sha256(who.encode()).hexdigest())
        acquired = lock.acquire(timeout=WAIT_S)
        try:
            if page_key is not None:
                hit = cache.get(page_key)  # the leader we waited for kept it
                if hit is not None:
                    return self._cached(hit)
            response = self.get_response(request)
            if page_key is not None and self._keepable(request, response):
                cache.set(page_key, {"content": response.content.decode("utf-8"), "type": response["Content-Type"]},
                          PAGE_TTL_S)
            return response
        finally:
            if acquired:
                lock.release()

    @staticmethod
    def _page_key(request, job_id: int) -> str | None:
        """The cache key of this anonymous visitor's page, or None when they may not see the job."""
        from webapp.jobs.models import Job
        from webapp.jobs.permissions import can_view

        job = Job.objects.filter(pk=job_id).only("id", "owner_id", "visibility", "gallery", "share_token",
                                                 "updated_at").first()
        token = request.GET.get("share") or None
        if job is None or not can_view(None, job, token):
            return None
        state = f"{request.get_full_path()}\0{job.visibility}\0{job.gallery}\0{job.share_token}\0{job.updated_at.timestamp()}"
        return "kw:page:" + hashlib.sha256(state.encode()).hexdigest()

    @staticmethod
    def _keepable(request, response) -> bool:
        """A page for anyone without an account: nothing personal in it, no cookie to set."""
        return (response.status_code == 200 and not response.cookies and not getattr(response, "streaming", False)
                and "private" not in response.get("Cache-Control", "")
                and not request.META.get("CSRF_COOKIE_NEEDS_UPDATE") and not request.user.is_authenticated)

    @staticmethod
    def _cached(hit: dict) -> HttpResponse:
        response = HttpResponse(hit["content"], content_type=hit["type"])
        response["X-Kernelwright-Cache"] = "page"
        return response
