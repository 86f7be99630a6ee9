"""The small messages pushed to a job's websocket viewers, built in one place.

The channel layer delivers at most once and drops big messages, so a message only says what
changed ("turn 4 is stored", "now timing", "finished"); the page fetches the data over HTTP.
`JobConsumer` has one handler per `Kind` (Channels maps "turn.ready" to `turn_ready`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


class Kind(enum.StrEnum):
    TURN_READY = "turn.ready"
    STEP = "job.step"
    STATE = "job.state"


def group_name(job_id: int) -> str:
    return f"job-{job_id}"


@dataclass
class JobNotification:
    kind: Kind
    job_id: int
    turn: int | None = None  # TURN_READY: the stored turn's index
    step: str = ""  # STEP: what the worker is doing now
    state: str = ""  # STATE: the job's new state
    reason: str = ""

    def to_message(self) -> dict[str, Any]:
        """The channel-layer message: `type` selects the consumer's handler."""
        body = dataclasses.asdict(self)
        body["kind"] = self.kind.value
        return {"type": self.kind.value, **body}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> JobNotification:
        fields = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in message.items() if k in fields}
        data["kind"] = Kind(data["kind"])
        return cls(**data)

    def to_client(self) -> dict[str, Any]:
        """What the browser receives (the same fields, without Channels' `type`)."""
        body = dataclasses.asdict(self)
        body["kind"] = self.kind.value
        return body


class _Announcer:
    """One event loop of its own per process, in a thread, for every announcement: the channel
    layer keeps its Redis connections per loop, so a new loop per call (async_to_sync) would open
    a new connection, and authenticate, for every message (about 10 ms each, measured)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self, coro, timeout: float) -> None:
        with self.lock:
            if self.loop is None or self.pid != os.getpid():  # none yet, or forked: threads do not survive a fork
                self.loop, self.pid = asyncio.new_event_loop(), os.getpid()
                threading.Thread(target=self.loop.run_forever, name="announce", daemon=True).start()
            loop = self.loop
        asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


_announcer = _Announcer()
ANNOUNCE_TIMEOUT_S = 5.0


def announce(note: JobNotification) -> None:
    """Send to the job's group; a dead channel layer must never fail the write that preceded it."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        _announcer.run(layer.group_send(group_name(note.job_id), note.to_message()), ANNOUNCE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a lost notification is recovered by the page's HTTP fetch
        logger.exception("could not announce %s for job %s", note.kind.value, note.job_id)
