"""The Django cache in Redis, with JSON values instead of pickles.

Django's RedisCache pickles every value by default, and unpickling runs code: anything that can
write to Redis (a candidate that reached it, once) could then run code in the web server by
overwriting a cached entry. Here every value is stored as JSON text (integers stay raw, as
Django stores them, so `incr` keeps working), and a value that is not JSON (a planted pickle,
garbage) is never decoded: the read is a miss, so the page renders afresh and overwrites it.

Values must be JSON types (str, int, float, bool, None, lists, dicts with string keys); storing
anything else raises TypeError at the `cache.set`. A tuple comes back as a list, a SafeString as
a plain str (callers mark their own rendered HTML safe again).

Settings: `CACHES["default"]["BACKEND"] = "webapp.cache.JSONRedisCache"` (webapp/settings.py).
"""

from __future__ import annotations

import json
import logging

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

logger = logging.getLogger(__name__)


class NotJSON(ValueError):
    """A cached value that is not JSON text: never decoded any other way."""


class JSONSerializer:
    """The `serializer` of Django's RedisCacheClient (dumps/loads), in JSON."""

    def dumps(self, obj):
        # Raw integers, like Django's own serializer: INCR/DECR on them stay atomic in Redis.
        if type(obj) is int:
            return obj
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()

    def loads(self, data: bytes):
        try:
            return json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise NotJSON(f"cached value is not JSON ({len(data)} bytes)") from exc


class JSONRedisCacheClient(RedisCacheClient):
    """Reads that meet a value which is not JSON answer a miss (and log it) instead of raising."""

    def __init__(self, servers, **options) -> None:
        options.setdefault("serializer", JSONSerializer)
        super().__init__(servers, **options)

    def _loads_or_miss(self, key, data):
        try:
            return self._serializer.loads(data)
        except NotJSON as exc:
            logger.warning("cache key %s: %s; treated as a miss", key, exc)
            return None

    def get(self, key, default):
        data = self.get_client(key).get(key)
        value = None if data is None else self._loads_or_miss(key, data)
        return default if value is None else value

    def get_many(self, keys):
        keys = list(keys)
        found = {}
        for key, data in zip(keys, self.get_client(None).mget(keys), strict=True):
            value = None if data is None else self._loads_or_miss(key, data)
            if value is not None:
                found[key] = value
        return found


class JSONRedisCache(RedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = JSONRedisCacheClient
