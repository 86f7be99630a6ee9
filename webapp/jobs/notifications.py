"""The messages pushed to a job's websocket viewers, built in one place.

A message says what changed ("turn 4 is stored", "now timing", "finished"). A "turn ready"
notice also carries the update a page needs to show that turn (webapp.jobs.live.update since the
turn before: its escaped HTML, the state, totals), built once where the turn was stored, so fifty
viewers need no fetch; the job's charts follow in a "charts" notice of their own (reading them
costs more than the rest, and the turn need not wait for them). A notice over MAX_UPDATE_BYTES
goes without its payload and pages fetch it. The channel layer delivers at most once: a page
that missed a notice asks GET /updates/ for every stored turn after its last one (on every
reconnect, and when a pushed turn leaves a gap).

The channel-layer message holds the client's JSON text already encoded (`text`), so a web
process forwards it to each of its sockets without encoding it again, and a `serial` per
notice, by which the consumer reads the job's access fields once per notice and process.
`JobConsumer` has one handler per `Kind` (Channels maps "turn.ready" to `turn_ready`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


class Kind(enum.StrEnum):
    TURN_READY = "turn.ready"
    CHARTS = "job.charts"
    STEP = "job.step"
    STATE = "job.state"


def group_name(job_id: int) -> str:
    return f"job-{job_id}"


MAX_UPDATE_BYTES = 256 * 1024  # a bigger update (a turn with huge diffs) is fetched, not pushed
PAYLOADS = ("update", "charts")  # the fields only the browser reads (left out of the readable copy)


@dataclass
class JobNotification:
    kind: Kind
    job_id: int
    turn: int | None = None  # TURN_READY: the stored turn's index
    step: str = ""  # STEP: what the worker is doing now
    state: str = ""  # STATE: the job's new state
    reason: str = ""
    update: dict[str, Any] | None = None  # TURN_READY: webapp.jobs.live.update(job, since=turn - 1), no charts
    charts: dict[str, Any] | None = None  # CHARTS: the job's chart data once turn `turn` is stored
    serial: str = field(default_factory=lambda: uuid.uuid4().hex)

    def to_client(self) -> dict[str, Any]:
        """What the browser receives: the fields without the serial (`update`, `charts` only when set)."""
        body = dataclasses.asdict(self)
        body["kind"] = self.kind.value
        del body["serial"]
        for payload in PAYLOADS:
            if body[payload] is None:
                del body[payload]
        return body

    def to_message(self) -> dict[str, Any]:
        """The channel-layer message: `type` selects the consumer's handler, `text` is what the
        browser receives, sent as is; the small fields stay readable beside it."""
        client = self.to_client()
        text = json.dumps(client, ensure_ascii=False, separators=(",", ":"))
        if any(p in client for p in PAYLOADS) and len(text.encode()) > MAX_UPDATE_BYTES:
            return dataclasses.replace(self, update=None, charts=None).to_message()
        for payload in PAYLOADS:
            client.pop(payload, None)
        return {"type": self.kind.value, **client, "serial": self.serial, "text": text}


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
    except Exception:  # a lost notification is recovered by the page's HTTP fetch
        logger.exception("could not announce %s for job %s", note.kind.value, note.job_id)
