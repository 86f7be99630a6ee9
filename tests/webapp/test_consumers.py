"""JobConsumer against the real ASGI app (webapp.asgi) and the real Redis channel layer:
who may connect, what arrives, and that permission is re-checked for every message."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs import services
from webapp.jobs.consumers import CLOSE_FORBIDDEN
from webapp.jobs.models import Job
from webapp.jobs.notifications import MAX_UPDATE_BYTES, JobNotification, Kind
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
from webapp.jobs.turns import group_by_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def owner():
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def job(owner) -> Job:
    return services.start_job(services.create_job(owner, "softmax", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False))


def cookie_for(user) -> bytes:
    c = Client()
    c.force_login(user)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


def communicator(job_id: int, user=None, query: str = "") -> WebsocketCommunicator:
    from webapp.asgi import application

    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        headers.append((b"cookie", cookie_for(user)))
    path = f"/ws/jobs/{job_id}/" + (f"?{query}" if query else "")
    return WebsocketCommunicator(application, path, headers=headers)


async def _await(coro):
    return await coro


def run(coro):
    """Run a scenario from this sync test (the ORM calls inside use sync_to_async)."""
    return async_to_sync(_await)(coro)


def test_the_owner_receives_turn_and_step_notifications(job, owner):
    comm = communicator(job.pk, owner)

    async def scenario():
        connected, _ = await comm.connect(timeout=5)
        assert connected
        try:
            events = group_by_turn(build(turns=1)["events"])[1]
            await sync_to_async(services.store_turn)(job, 1, events)
            note = await comm.receive_json_from(timeout=5)
            update = note.pop("update")
            assert note == {"kind": "turn.ready", "job_id": job.pk, "turn": 1, "step": "", "state": "", "reason": ""}
            # the notice carries the stored turn, rendered: the page shows it without a fetch
            assert update["last_index"] == 1 and 'id="turn-1"' in update["html"] and 'id="turn-0"' not in update["html"]
            assert update["live"]["state"] == "running"
            charts = await comm.receive_json_from(timeout=5)  # the charts follow in a notice of their own
            assert charts["kind"] == "job.charts" and charts["turn"] == 1 and "speedup" in charts["charts"]
            await sync_to_async(services.set_step)(job.pk, "checking correctness 3/5")
            note = await comm.receive_json_from(timeout=5)
            assert note["kind"] == "job.step" and note["step"] == "checking correctness 3/5"
            await sync_to_async(services.finish_job)(job, Job.State.SUCCEEDED, "done")
            note = await comm.receive_json_from(timeout=5)
            assert note["kind"] == "job.state" and note["state"] == "succeeded"
            await comm.send_json_to({"kind": "ping"})
            assert await comm.receive_json_from(timeout=5) == {"kind": "pong"}
        finally:
            await comm.disconnect()

    run(scenario())


@pytest.mark.parametrize("who", ["anonymous", "other"])
def test_it_refuses_viewers_without_permission(job, who):
    user = None if who == "anonymous" else User.objects.create_user("other", password="pw-other-123")
    comm = communicator(job.pk, user)

    async def scenario():
        connected, code = await comm.connect(timeout=5)
        assert not connected and code == CLOSE_FORBIDDEN
        await comm.disconnect()

    run(scenario())


def test_it_refuses_unknown_jobs(owner):
    comm = communicator(999999, owner)

    async def scenario():
        connected, code = await comm.connect(timeout=5)
        assert not connected and code == CLOSE_FORBIDDEN

    run(scenario())


def test_share_token_and_public_jobs_connect_anonymously(job):
    token = services.create_share_link(job)

    async def scenario():
        for comm in (communicator(job.pk, query=f"share={token}"),):
            connected, _ = await comm.connect(timeout=5)
            assert connected
            await comm.disconnect()
        bad = communicator(job.pk, query="share=wrong")
        connected, _ = await bad.connect(timeout=5)
        assert not connected
        await sync_to_async(services.set_visibility)(job, "public")
        pub = communicator(job.pk)
        connected, _ = await pub.connect(timeout=5)
        assert connected
        await pub.disconnect()

    run(scenario())


def test_a_revoked_share_link_closes_the_socket_at_the_next_message(job):
    token = services.create_share_link(job)
    comm = communicator(job.pk, query=f"share={token}")

    async def scenario():
        connected, _ = await comm.connect(timeout=5)
        assert connected
        await sync_to_async(services.revoke_share_link)(job)
        await sync_to_async(services.set_step)(job.pk, "timing")
        output = await comm.receive_output(timeout=5)
        assert output == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}
        await comm.disconnect()

    run(scenario())


def test_a_turn_never_reaches_a_socket_whose_link_was_revoked_before_it_was_stored(job):
    """The notice carries the turn's content: access is read again after each notice arrives,
    so a link revoked before the turn was stored closes the socket instead of showing the turn."""
    token = services.create_share_link(job)
    comm = communicator(job.pk, query=f"share={token}")
    turn = group_by_turn(build(turns=2)["events"])

    async def scenario():
        connected, _ = await comm.connect(timeout=5)
        assert connected
        await sync_to_async(services.store_turn)(job, 0, turn[0])
        assert (await comm.receive_json_from(timeout=5))["kind"] == "turn.ready"  # allowed: the turn arrives
        assert (await comm.receive_json_from(timeout=5))["kind"] == "job.charts"
        await sync_to_async(services.revoke_share_link)(job)
        await sync_to_async(services.store_turn)(job, 1, turn[1])
        output = await comm.receive_output(timeout=5)
        assert output == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}
        await comm.disconnect()

    run(scenario())


def test_an_update_too_big_to_push_leaves_the_fetch_to_the_page():
    huge = {"html": "x" * (MAX_UPDATE_BYTES + 1), "last_index": 3, "live": {}, "totals": {}, "charts": None}
    message = JobNotification(Kind.TURN_READY, 7, turn=3, update=huge).to_message()
    assert json.loads(message["text"]) == {
        "kind": "turn.ready",
        "job_id": 7,
        "turn": 3,
        "step": "",
        "state": "",
        "reason": "",
    }
    small = JobNotification(Kind.TURN_READY, 7, turn=3, update=huge | {"html": "<article>"}).to_message()
    assert json.loads(small["text"])["update"]["html"] == "<article>"
    charts = JobNotification(
        Kind.CHARTS, 7, turn=3, charts={"speedup": {"data": ["y" * MAX_UPDATE_BYTES]}}
    ).to_message()
    assert "charts" not in json.loads(charts["text"])


def test_a_viewer_misses_nothing_by_fetching_after_reconnect(job, owner):
    """Notifications sent while nobody listens are lost by design; the page's HTTP fetch (since=N)
    returns every stored turn after the last one it has."""
    for index, events in group_by_turn(build(turns=3)["events"]).items():
        services.store_turn(job, index, events)
    client = Client()
    client.force_login(owner)
    data = client.get(f"/jobs/{job.pk}/updates/", {"since": 1}).json()
    assert data["last_index"] == 3 and 'id="turn-2"' in data["html"] and 'id="turn-3"' in data["html"]
    comm = communicator(job.pk, owner)

    async def scenario():
        connected, _ = await comm.connect(timeout=5)
        assert connected
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()

    run(scenario())
