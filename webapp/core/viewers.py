"""The crowd watching a job, answered before Django (issue 20: fifty viewers of one running job).

Viewers without an account (a public job, a share link) all get the same job page, the same
answer from /jobs/<id>/updates/?since=N when their sockets (re)connect (a stored turn itself comes
in its websocket notice), the same turn fragments. This ASGI layer keeps each such answer in the
shared cache, whole (status, headers, body), under a key made of the URL and the job's access
fields and `updated_at` (which every change viewers can see moves), read fresh from the database
for every request; a request is answered from it only when the permission check
(webapp.jobs.permissions.can_view) admits the visitor. So a job made private, a revoked link or a
new turn take effect on the next request, and a hit costs one small query and one cache read in a
thread, no middleware, no view. Identical requests that miss at the same moment in one process
run Django once; the others get that answer. The latest answers are also kept in the process
(MEMO_SIZE), under the same keys, so a repeat costs no Redis read.

Not for anyone with a session cookie or a token (their pages differ), and not for an answer that
sets a cookie or is not a 200.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re

from asgiref.sync import sync_to_async
from django.conf import settings

logger = logging.getLogger(__name__)

SHARED = re.compile(r"^/jobs/(\d+)/(?:updates/|turns/\d+/html)?$")
TTL_S = 60
SKIP_HEADERS = {b"set-cookie", b"date", b"server"}


def _anonymous(scope) -> bool:
    cookie_name = settings.SESSION_COOKIE_NAME.encode()
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return False
        if name == b"cookie" and cookie_name + b"=" in value:
            return False
    return True


MEMO_SIZE = 256  # answers kept in this process too (no Redis read, no decoding for a repeat)
_memo: dict[str, dict] = {}


def _remember(key: str, answer: dict) -> None:
    if len(_memo) >= MEMO_SIZE:
        _memo.pop(next(iter(_memo)), None)  # the oldest
    _memo[key] = answer


def _lookup(path: str, query: str, job_id: int) -> tuple[str | None, dict | None]:
    """(cache key, cached answer) for an anonymous visitor, or (None, None) when they may not
    see the job (Django then answers as usual). Runs in a thread."""
    from urllib.parse import parse_qs

    from django.core.cache import cache
    from django.db import connection

    from webapp.jobs.models import Job
    from webapp.jobs.permissions import can_view

    try:
        job = (
            Job.objects.filter(pk=job_id)
            .only("id", "owner_id", "visibility", "gallery", "share_token", "updated_at", *PAGE_FIELDS)
            .first()
        )
        version = _page_version(job) if job is not None and PAGE.match(path) else None
    except Exception:  # a connection gone stale in this thread: Django's path answers
        connection.close()
        return None, None
    token = (parse_qs(query).get("share") or [None])[0]
    if job is None or not can_view(None, job, token):
        return None, None
    changed = version if version is not None else job.updated_at.timestamp()
    state = f"{path}?{query}\0{job.visibility}\0{job.gallery}\0{job.share_token}\0{changed}"
    key = "kw:viewer:" + hashlib.sha256(state.encode()).hexdigest()
    hit = _memo.get(key)
    if hit is None:
        hit = cache.get(key)
        if hit is not None:
            hit["bytes"] = hit["body"].encode("utf-8")
            _remember(key, hit)
    return key, hit


PAGE = re.compile(r"^/jobs/\d+/$")
PAGE_FIELDS = ("state", "reason", "summary", "finished_at", "best_version", "best_reward", "best_confirmed")


def _page_version(job) -> str:
    """What the job page shows apart from the live step: its state, result and newest turn. A
    progress step moves `updated_at` several times a second while a job runs, and keyed on it
    every reload of fifty viewers rendered the page again; the page's script fetches the live
    state (/updates/, keyed on updated_at) as soon as its socket opens, so a page whose step is a
    moment old is caught up at once, and everything else on it is in this version."""
    from webapp.jobs.models import Turn

    last = Turn.objects.filter(job_id=job.pk).order_by("-index").values_list("index", "revision").first()
    fields = [str(getattr(job, f)) for f in PAGE_FIELDS]
    return hashlib.sha256("\0".join([*fields, str(last)]).encode()).hexdigest()


def _store(key: str, answer: dict) -> None:
    from django.core.cache import cache

    cache.set(key, answer, TTL_S)
    _remember(key, answer | {"bytes": answer["body"].encode("utf-8")})


class SharedViewerCache:
    def __init__(self, app) -> None:
        self.app = app
        self.inflight: dict[str, asyncio.Future] = {}

    async def __call__(self, scope, receive, send):
        match = SHARED.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "GET" or not _anonymous(scope):
            return await self.app(scope, receive, send)
        query = scope.get("query_string", b"").decode("latin-1")
        key, hit = await sync_to_async(_lookup, thread_sensitive=False)(scope["path"], query, int(match.group(1)))
        if key is None:
            return await self.app(scope, receive, send)
        if hit is None and key in self.inflight:
            try:
                hit = await asyncio.wait_for(asyncio.shield(self.inflight[key]), 10)
            except Exception:  # the leader failed or took too long: ask Django ourselves
                hit = None
        if hit is not None:
            return await self._replay(send, hit)
        future = asyncio.get_running_loop().create_future()
        self.inflight[key] = future
        captured: dict = {"headers": [], "body": []}

        async def capture(message):
            if message["type"] == "http.response.start":
                captured["status"] = message["status"]
                captured["headers"] = [
                    [k.decode("latin-1"), v.decode("latin-1")]
                    for k, v in message.get("headers", [])
                    if k.lower() not in SKIP_HEADERS
                ]
                captured["cookie"] = any(k.lower() == b"set-cookie" for k, _ in message.get("headers", []))
            elif message["type"] == "http.response.body":
                captured["body"].append(message.get("body", b""))
            await send(message)

        answer = None
        try:
            await self.app(scope, receive, capture)
            body = b"".join(captured["body"])
            if captured.get("status") == 200 and not captured.get("cookie"):
                try:
                    answer = {"status": 200, "headers": captured["headers"], "body": body.decode("utf-8")}
                except UnicodeDecodeError:
                    answer = None
            if answer is not None:
                try:
                    await sync_to_async(_store, thread_sensitive=False)(key, answer)
                except Exception:  # only slower next time
                    logger.warning("could not keep a viewer answer", exc_info=True)
        finally:
            self.inflight.pop(key, None)
            if not future.done():
                future.set_result(answer)

    @staticmethod
    async def _replay(send, hit: dict) -> None:
        body = hit.get("bytes") or hit["body"].encode("utf-8")
        headers = [
            (k.encode("latin-1"), v.encode("latin-1")) for k, v in hit["headers"] if k.lower() != "content-length"
        ]
        headers += [(b"content-length", str(len(body)).encode()), (b"x-kernelwright-cache", b"viewer")]
        await send({"type": "http.response.start", "status": hit["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body})
