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
import threading
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

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


def announce(note: JobNotification) -> None:
    """Send to the job's group; a dead channel layer must never fail the write that preceded it."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return

    def send() -> None:
        async_to_sync(layer.group_send)(group_name(note.job_id), note.to_message())

    try:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            send()
        else:
            # A sync caller inside a running event loop (a sync view under an async server thread,
            # Playwright's sync API in tests): async_to_sync refuses to run there, a thread does not.
            thread = threading.Thread(target=send, name="announce")
            thread.start()
            thread.join()
    except Exception:  # noqa: BLE001 - a lost notification is recovered by the page's HTTP fetch
        logger.exception("could not announce %s for job %s", note.kind.value, note.job_id)
