"""Session-wide test setup: a Redis database of this session's own (see tests/support/__init__.py).

pytest-django loads the settings before this file, so the Redis settings are re-pointed here,
before any test runs and before anything connects.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

# The GPU hosts have torch, numpy and pytest but no Django or Redis client: there only the
# library tests (tests/sandbox, tests/agent) are collected, and nothing here touches Redis.
WEB_STACK = all(importlib.util.find_spec(name) for name in ("django", "redis", "celery", "channels"))
if not WEB_STACK:
    collect_ignore = ["webapp"]
else:
    from tests.support.redis_db import ClaimedRedisDb, claim_redis_db, redis_reachable

BASE_REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"

# nvcc with cuBLAS's headers (scripts/cuda_toolchain.sh), when there, first on PATH for the whole
# session: the sandbox binds the toolchain folders it finds on PATH once, when it first starts
# (sandbox.containment.runtime_paths), before a test could add one; a system CUDA without cuBLAS
# (this machine's /usr/local/cuda) would otherwise be the nvcc the tests marked nvcc get.
_CUDA_BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cuda", "bin")
if os.path.exists(os.path.join(_CUDA_BIN, "nvcc")):
    os.environ["PATH"] = _CUDA_BIN + os.pathsep + os.environ.get("PATH", "")


def _point_django_at(url: str) -> None:
    from channels.layers import channel_layers
    from django.conf import settings

    from webapp.celery import app
    from webapp.settings import redis_settings

    for name, value in redis_settings(url).items():
        setattr(settings, name, value)
    from asgiref.local import Local
    from django.core.cache import caches

    caches.__dict__.pop("settings", None)  # re-read CACHES on first use
    caches._settings = None
    caches._connections = Local(caches.thread_critical)

    app.conf.update(broker_url=url, result_backend=url)
    channel_layers.backends.clear()
    os.environ["REDIS_URL"] = url  # subprocesses that tests start inherit it


def _claim() -> ClaimedRedisDb | None:
    if not WEB_STACK or not redis_reachable(BASE_REDIS_URL):
        return None
    claimed = claim_redis_db(BASE_REDIS_URL)
    _point_django_at(claimed.url)
    return claimed


TEST_REDIS = _claim()


def pytest_report_header(config: pytest.Config) -> str:
    if TEST_REDIS is None:
        return f"redis: none answers at {BASE_REDIS_URL} (tests that need it fail)"
    return f"redis: {TEST_REDIS.url} (this session's own database)"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if TEST_REDIS is not None:
        TEST_REDIS.release()


@pytest.fixture(scope="session")
def redis_url() -> str:
    if TEST_REDIS is None:
        pytest.fail(f"no Redis answers at {BASE_REDIS_URL}: start one, set REDIS_URL, or run the tests with ./kw test")
    return TEST_REDIS.url
