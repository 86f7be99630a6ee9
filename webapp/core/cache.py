"""The Django cache when Redis is away: a miss, not an error page.

Pages only use the cache to go faster (rendered turns, update answers), and everything in it can
be computed again from the database. So while Redis does not answer (restarting, lost), a read
is a miss and a write does nothing, and for BREAK_S after a failure Redis is not even asked:
pages keep being served at the speed of rendering them afresh, instead of failing or each
waiting for a connection timeout. Values are JSON as in webapp.cache.JSONRedisCache.
"""

from __future__ import annotations

import functools
import logging
import time

import redis

from webapp.cache import JSONRedisCache

logger = logging.getLogger(__name__)

BREAK_S = 2.0
DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
_breaker = {"until": 0.0}  # shared by every thread's cache object in this process


def _tolerant(fallback):
    def wrap(method):
        @functools.wraps(method)
        def inner(self, *args, **kwargs):
            if time.monotonic() < _breaker["until"]:
                return fallback(*args, **kwargs)
            try:
                return method(self, *args, **kwargs)
            except DOWN as exc:
                if time.monotonic() >= _breaker["until"]:
                    logger.warning(
                        "cache: Redis does not answer (%s): serving without the cache for %.0f s",
                        type(exc).__name__,
                        BREAK_S,
                    )
                _breaker["until"] = time.monotonic() + BREAK_S
                return fallback(*args, **kwargs)

        return inner

    return wrap


def _default(key, default=None, *args, **kwargs):
    return default


class TolerantJSONRedisCache(JSONRedisCache):
    get = _tolerant(_default)(JSONRedisCache.get)
    set = _tolerant(lambda *a, **k: None)(JSONRedisCache.set)
    add = _tolerant(lambda *a, **k: False)(JSONRedisCache.add)
    touch = _tolerant(lambda *a, **k: False)(JSONRedisCache.touch)
    delete = _tolerant(lambda *a, **k: False)(JSONRedisCache.delete)
    has_key = _tolerant(lambda *a, **k: False)(JSONRedisCache.has_key)
    get_many = _tolerant(lambda *a, **k: {})(JSONRedisCache.get_many)
    set_many = _tolerant(lambda keys, *a, **k: list(keys))(JSONRedisCache.set_many)
    delete_many = _tolerant(lambda *a, **k: None)(JSONRedisCache.delete_many)
