"""The websocket of one job: small notifications to viewers who may see it, nothing else.

Permission is checked on connect (owner, staff, public job, or the share token in the query
string) and again before forwarding each group message, because a job can turn private or
its share link be revoked while a viewer is connected. A viewer that lost permission is closed.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.jobs.models import Job
from webapp.jobs.notifications import JobNotification, group_name
from webapp.jobs.permissions import can_view

CLOSE_FORBIDDEN = 4403


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

    @database_sync_to_async
    def _allowed(self) -> bool:
        job = Job.objects.filter(pk=self.job_id).only("id", "owner_id", "visibility", "gallery", "share_token").first()
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
