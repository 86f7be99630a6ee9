"""The websocket of one job: notifications (a stored turn with its rendered update, the charts,
a step, a state) to viewers who may see the job, nothing else.

Permission is checked on connect (owner, staff, public job, or the share token in the query
string) and again before forwarding each group message, because a job can turn private or its
share link be revoked while a viewer is connected. A viewer that lost permission is closed
before the message, which may hold the turn's content, reaches it.

The re-check reads the job's access fields once per notice and process, after the notice
arrived (keyed by the notice's `serial`): with fifty viewers of one job, one query per
notification instead of fifty (Channels runs them one after another on its single database
thread), and a change of access committed before a turn was announced is always seen.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.core.consumers import CLOSE_FORBIDDEN
from webapp.jobs.models import Job
from webapp.jobs.notifications import group_name
from webapp.jobs.permissions import can_view

ACCESS_FIELDS = ("id", "owner_id", "visibility", "gallery", "share_token")

_access_cache: dict[int, tuple[str, Job | None]] = {}  # job id -> (the notice it was read for, the job)
_access_locks: dict[int, asyncio.Lock] = {}


@database_sync_to_async
def _load_access(job_id: int) -> Job | None:
    return Job.objects.filter(pk=job_id).only(*ACCESS_FIELDS).first()


async def job_access(job_id: int, serial: str | None = None) -> Job | None:
    """The job's access fields, read after notice `serial` arrived (once for every socket of
    this process); without a serial (a connect), read now."""
    hit = _access_cache.get(job_id)
    if serial is not None and hit is not None and hit[0] == serial:
        return hit[1]
    lock = _access_locks.setdefault(job_id, asyncio.Lock())
    async with lock:
        hit = _access_cache.get(job_id)
        if serial is not None and hit is not None and hit[0] == serial:
            return hit[1]
        job = await _load_access(job_id)
        if serial is not None:
            _access_cache[job_id] = (serial, job)
        return job


class JobConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        query = parse_qs((self.scope.get("query_string") or b"").decode())
        self.share_token = (query.get("share") or [None])[0]
        self.joined = False
        if not await self._allowed():
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

    async def _allowed(self, serial: str | None = None) -> bool:
        job = await job_access(self.job_id, serial)
        return job is not None and can_view(self.scope.get("user"), job, self.share_token)

    async def _forward(self, message: dict) -> None:
        """The notice's client text as encoded once by the announcer (notifications.to_message)."""
        if not await self._allowed(message["serial"]):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.send(text_data=message["text"])

    # One handler per notifications.Kind.
    async def turn_ready(self, message: dict) -> None:
        await self._forward(message)

    async def job_charts(self, message: dict) -> None:
        await self._forward(message)

    async def job_step(self, message: dict) -> None:
        await self._forward(message)

    async def job_state(self, message: dict) -> None:
        await self._forward(message)
