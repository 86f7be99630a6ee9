"""A Redis database number of its own for each test session.

Tests and a running app may share one Redis server; Celery queues and Channels groups live in a
database, so a session that takes a free database (1-15) sees none of the app's messages, and two
test sessions at once do not steal each other's tasks.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import redis

LOCK_KEY = "kernelwright:test-session"
LOCK_TTL_S = 6 * 3600


@dataclass
class ClaimedRedisDb:
    url: str
    db: int
    owner: str

    def release(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=5)
        try:
            if (client.get(LOCK_KEY) or b"").decode() == self.owner:
                client.flushdb()
        finally:
            client.close()


def with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def redis_reachable(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def _owner_is_dead(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's session: let its lock expire
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def claim_redis_db(base_url: str, candidates: range = range(1, 16)) -> ClaimedRedisDb:
    """Take the first database that is empty or held by a test session that died, and flush it."""
    base_db = int(urlsplit(base_url).path.lstrip("/") or 0)
    owner = f"{socket.gethostname()}:{os.getpid()}"
    for db in candidates:
        if db == base_db:
            continue
        url = with_db(base_url, db)
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            if client.set(LOCK_KEY, owner, nx=True, ex=LOCK_TTL_S):
                # A database holding anything else belongs to someone (an app on REDIS_URL=.../N):
                # never flush it.
                claimed = client.dbsize() == 1
                if not claimed:
                    client.delete(LOCK_KEY)
            else:
                holder = (client.get(LOCK_KEY) or b"").decode()
                claimed = _owner_is_dead(holder)
            if claimed:
                client.flushdb()
                client.set(LOCK_KEY, owner, ex=LOCK_TTL_S)
                return ClaimedRedisDb(url, db, owner)
        except redis.ResponseError:
            break  # "DB index is out of range": the server has fewer databases
        finally:
            client.close()
    raise RuntimeError(f"no free Redis database for this test session on {base_url}")
