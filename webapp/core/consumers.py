"""The echo websocket: a client's text comes back after a trip through the channel layer.

Not a product feature: it proves, in tests and by hand, that websockets reach the ASGI app and
that the Redis channel layer delivers (the consumer sends to its own channel, never directly).
A diagnostic, so only the operator's view gets it (webapp.core.operator_view): on a deployment
reachable by other names, a visitor's connection is refused before anything is relayed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from webapp.core import operator_view

CLOSE_FORBIDDEN = 4403  # a websocket close code for "not allowed" (4000-4999: the application's own)


class EchoKind(StrEnum):
    ECHO = "echo.message"


class EchoMessage(TypedDict):
    type: str  # EchoKind.ECHO: Channels dispatches it to `echo_message`
    text: str


def echo_message(text: str) -> EchoMessage:
    return {"type": EchoKind.ECHO.value, "text": text}


class EchoConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if not await database_sync_to_async(operator_view.may_see)(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data is None:
            await self.close(code=1003)
            return
        await self.channel_layer.send(self.channel_name, echo_message(text_data))

    async def echo_message(self, event: EchoMessage) -> None:
        await self.send(text_data=event["text"])
