"""The Django cache in Redis holds JSON only, and never unpickles what it finds there.

Unpickling runs code: with pickled cache entries, anything that could write to Redis could run
code in the web server. These tests read the raw bytes in Redis and plant a pickle that would
leave a file behind if it were ever loaded.
"""

from __future__ import annotations

import json
import os
import pickle

import pytest
import redis
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from webapp.jobs.importer import import_trajectory
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.django_db


def raw_client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


class Planted:
    """A pickle whose loading creates `path`: proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_cached_value_is_json_text_in_redis(redis_url) -> None:
    value = {"html": "<b>turn</b> é", "files": {"a.cu": "x"}, "n": 3, "ok": True, "none": None}
    cache.set("hardening:value", value, 60)

    raw = raw_client(redis_url).get(cache.make_key("hardening:value"))

    assert raw is not None and not raw.startswith(b"\x80")  # pickle protocol 2+ opens with 0x80
    assert json.loads(raw) == value
    assert cache.get("hardening:value") == value


def test_integers_stay_raw_so_incr_still_works(redis_url) -> None:
    cache.set("hardening:count", 41, 60)
    assert cache.incr("hardening:count") == 42
    assert raw_client(redis_url).get(cache.make_key("hardening:count")) == b"42"


def test_a_value_that_is_not_json_is_refused_when_stored() -> None:
    with pytest.raises(TypeError):
        cache.set("hardening:object", object(), 60)


def test_a_pickle_planted_under_a_cache_key_is_a_miss_and_never_runs(redis_url, tmp_path) -> None:
    marker = tmp_path / "pickle-ran"
    payload = pickle.dumps(Planted(str(marker)))
    assert pickle.loads(payload) == 0 and marker.exists()  # the payload does run when unpickled
    marker.unlink()
    client = raw_client(redis_url)
    client.set(cache.make_key("hardening:planted"), payload)
    cache.set("hardening:honest", "kept", 60)

    assert cache.get("hardening:planted") is None
    assert cache.get("hardening:planted", "default") == "default"
    assert cache.get_many(["hardening:planted", "hardening:honest"]) == {"hardening:honest": "kept"}
    assert not marker.exists()


def test_pages_leave_only_json_in_the_cache(redis_url) -> None:
    """The real call sites (rendered turns, workspaces, job updates, diffs) through the pages."""
    owner = User.objects.create_user("cache-owner", password="pw-cache-123")
    job = import_trajectory(owner, build(turns=4))
    client = Client()
    client.force_login(owner)
    cache.clear()

    assert client.get(f"/jobs/{job.pk}/").status_code == 200
    assert client.get(f"/jobs/{job.pk}/updates/", {"since": 1}).status_code == 200
    assert client.get("/compare/", {"a": job.pk, "ta": 1, "b": job.pk, "tb": 4}).status_code == 200

    r = raw_client(redis_url)
    keys = [k for k in r.keys(f"{cache.make_key('')[:-1]}*")]
    kinds = {k.decode().split(":")[3] for k in keys}
    assert {"turn-html", "turn-files", "updates", "diff-html"} <= kinds, kinds
    for key in keys:
        json.loads(r.get(key))  # every entry is JSON text (or a raw integer, also JSON)


def test_a_planted_pickle_over_a_rendered_turn_is_rendered_afresh(redis_url, tmp_path) -> None:
    """The attack from issue 16: overwrite a rendered turn's cache entry, then view the page."""
    from webapp.jobs import turn_html

    owner = User.objects.create_user("cache-victim", password="pw-cache-123")
    job = import_trajectory(owner, build(turns=2))
    client = Client()
    client.force_login(owner)
    assert client.get(f"/jobs/{job.pk}/").status_code == 200
    marker = tmp_path / "pickle-ran"
    r = raw_client(redis_url)
    for turn in job.turns.all():
        r.set(cache.make_key(turn_html._key(turn)), pickle.dumps(Planted(str(marker))))

    response = client.get(f"/jobs/{job.pk}/")

    assert response.status_code == 200
    assert not marker.exists()
    for turn in job.turns.all():  # overwritten with the honest rendering
        assert isinstance(json.loads(r.get(cache.make_key(turn_html._key(turn)))), str)


def test_celery_and_the_channel_layer_accept_no_pickle(settings) -> None:
    from webapp.celery import app

    assert app.conf.task_serializer == app.conf.result_serializer == app.conf.event_serializer == "json"
    assert list(app.conf.accept_content) == ["json"] and list(app.conf.result_accept_content) == ["json"]
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["serializer_format"] == "msgpack"


def test_a_worker_refuses_a_pickled_task_message_without_running_it(live_workers, redis_url, tmp_path) -> None:
    """A task message planted in a queue as a pickle (what a worker accepting pickle would run)."""
    import uuid

    from kombu import Connection, Producer

    from tests.support.processes import wait_for
    from webapp.celery import app
    from webapp.core.tasks import PING_TASKS
    from webapp.queues import Queue

    marker = tmp_path / "pickle-ran"
    queue = next(q for q in app.conf.task_queues if q.name == "compile")
    task_id = uuid.uuid4().hex
    with Connection(redis_url) as conn:
        Producer(conn).publish(
            Planted(str(marker)),
            serializer="pickle",
            exchange=queue.exchange,
            routing_key="compile",
            declare=[queue],
            headers={
                "task": "kernelwright.compile.ping",
                "id": task_id,
                "lang": "py",
                "argsrepr": "",
                "kwargsrepr": "",
            },
        )

    worker = live_workers["compile"]
    wait_for(
        lambda: "Refusing to deserialize untrusted content of type pickle" in worker.log_tail(200_000),
        30,
        what="the worker to refuse the pickle",
    )
    assert not marker.exists()
    assert PING_TASKS[Queue.COMPILE].delay(payload="after").get(timeout=60)["payload"] == "after"
