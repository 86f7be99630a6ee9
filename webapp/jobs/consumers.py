"""The websocket of one job: small notifications to viewers who may see it, nothing else.

Permission is checked on connect (owner, staff, public job, or the share token in the query
string) and again before forwarding each group message, because a job can turn private or
its share link be revoked while a viewer is connected. A viewer that lost permission is closed.

The re-check reads the job's access fields through a per-process cache that lives for
RECHECK_TTL_S: with 50 viewers of one job, one query per notification instead of 50 (Channels
runs them one after another on its single database thread). A revoked link or a job made
private therefore closes sockets within that time; the HTTP fetch that follows each
notification checks permission again without any cache.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.jobs.models import Job
from webapp.jobs.notifications import JobNotification, group_name
from webapp.jobs.permissions import can_view

CLOSE_FORBIDDEN = 4403
RECHECK_TTL_S = 1.0
ACCESS_FIELDS = ("id", "owner_id", "visibility", "gallery", "share_token")

_access_cache: dict[int, tuple[float, Job | None]] = {}
_access_locks: dict[int, asyncio.Lock] = {}


@database_sync_to_async
def _load_access(job_id: int) -> Job | None:
    return Job.objects.filter(pk=job_id).only(*ACCESS_FIELDS).first()


async def job_access(job_id: int, fresh: bool = False) -> Job | None:
    """The job's access fields, at most RECHECK_TTL_S old (fresh=True: read now)."""
    now = time.monotonic()
    hit = _access_cache.get(job_id)
    if not fresh and hit is not None and now - hit[0] < RECHECK_TTL_S:
        return hit[1]
    lock = _access_locks.setdefault(job_id, asyncio.Lock())
    async with lock:
        hit = _access_cache.get(job_id)
        if not fresh and hit is not None and time.monotonic() - hit[0] < RECHECK_TTL_S:
            return hit[1]
        job = await _load_access(job_id)
        _access_cache[job_id] = (time.monotonic(), job)
        return job


class JobConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        query = parse_qs((self.scope.get("query_string") or b"").decode())
        self.share_token = (query.get("share") or [None])[0]
        self.joined = False
        if not await self._allowed(fresh=True):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.channel_layer.group_add(group_name(self.job_id), self.channel_name)
        self.joined = True
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "joined", False):
            await self.channel_layer.group_discard(group_name(self.job_id), self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        """Viewers only listen; a ping is answered so a page can tell a live socket from a dead one."""
        if isinstance(content, dict) and content.get("kind") == "ping":
            await self.send_json({"kind": "pong"})

    async def _allowed(self, fresh: bool = False) -> bool:
        job = await job_access(self.job_id, fresh=fresh)
        return job is not None and can_view(self.scope.get("user"), job, self.share_token)

    async def _forward(self, message: dict) -> None:
        if not await self._allowed():
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.send_json(JobNotification.from_message(message).to_client())

    # One handler per notifications.Kind.
    async def turn_ready(self, message: dict) -> None:
        await self._forward(message)

    async def job_step(self, message: dict) -> None:
        await self._forward(message)

    async def job_state(self, message: dict) -> None:
        await self._forward(message)
