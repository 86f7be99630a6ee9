"""Channels: messages cross the real Redis channel layer, and websockets reach the real ASGI app."""

from __future__ import annotations

import uuid

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer


def test_the_configured_layer_is_redis_on_this_sessions_database(redis_url: str) -> None:
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    assert layer.hosts[0]["address"] == redis_url


def test_a_group_message_crosses_from_one_layer_client_to_another(redis_url: str) -> None:
    """Two independent layer clients stand for two processes: the only way between them is Redis."""
    sender, receiver = RedisChannelLayer(hosts=[redis_url]), RedisChannelLayer(hosts=[redis_url])
    group, token = f"test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    seen_in_redis = []

    async def scenario() -> dict:
        channel = await receiver.new_channel()
        await receiver.group_add(group, channel)
        try:
            await sender.group_send(group, {"type": "test.message", "token": token})
            seen_in_redis.append(redis.Redis.from_url(redis_url).exists(receiver._group_key(group)))
            return await receiver.receive(channel)
        finally:
            await receiver.group_discard(group, channel)
            await sender.flush()
            await receiver.flush()

    message = async_to_sync(scenario)()
    assert message == {"type": "test.message", "token": token}
    assert seen_in_redis == [1]


@pytest.mark.django_db  # the auth middleware and Channels' connection cleanup touch the database
def test_echo_websocket_round_trips_through_the_asgi_app_and_layer(redis_url: str) -> None:
    from webapp.asgi import application

    async def scenario() -> list[str]:
        communicator = WebsocketCommunicator(application, "/ws/echo/", headers=[(b"origin", b"http://127.0.0.1")])
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        try:
            replies = []
            for text in ("hello", "kernel ✓"):
                await communicator.send_to(text_data=text)
                replies.append(await communicator.receive_from(timeout=10))
            return replies
        finally:
            await communicator.disconnect()

    assert async_to_sync(scenario)() == ["hello", "kernel ✓"]


@pytest.mark.django_db
def test_websocket_from_a_foreign_origin_is_refused(redis_url: str) -> None:
    from webapp.asgi import application

    async def scenario() -> bool:
        communicator = WebsocketCommunicator(application, "/ws/echo/", headers=[(b"origin", b"http://evil.example")])
        connected, _ = await communicator.connect(timeout=10)
        await communicator.disconnect()
        return connected

    assert async_to_sync(scenario)() is False
