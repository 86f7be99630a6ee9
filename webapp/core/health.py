"""What /healthz reports: each part of the service stack, checked for real.

The view is a thin wrapper around `collect_health()`, which tests call directly. A part is
required when the product cannot work without it (database, Redis, channel layer, at least one
live worker per queue, the sandbox's containment); any required part down makes the report not
ok (HTTP 503). A part can be up and still carry a warning (containment switched off on purpose),
which the page shows in large letters and the JSON lists under "warnings". An optional part that
is not set up (no model endpoint) is neither up nor down: state "not configured", ok null.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from asgiref.sync import async_to_sync
from django.conf import settings

from webapp.queues import Queue

SCHEMA = "kernelwright.health/1"


UP, DOWN, NOT_CONFIGURED = "up", "down", "not configured"


@dataclass
class PartStatus:
    name: str
    ok: bool | None  # None: not configured, neither up nor a failure
    required: bool
    summary: str  # one line for people
    detail: dict = field(default_factory=dict)
    error: str | None = None
    elapsed_ms: float = 0.0
    warning: str | None = None  # up, but a person must know: shown loudly on /health/
    redacted: bool = False  # details left out for a visitor (HealthReport.public)

    @property
    def state(self) -> str:
        return NOT_CONFIGURED if self.ok is None else UP if self.ok else DOWN


@dataclass
class HealthReport:
    parts: list[PartStatus]

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.parts if p.required)

    def part(self, name: str) -> PartStatus:
        return next(p for p in self.parts if p.name == name)

    def public(self) -> HealthReport:
        """The report for someone who is not the operator (webapp.core.operator_view): each part's
        state and warning, not the worker host names, URLs, versions and error texts behind it."""
        return HealthReport(
            [
                PartStatus(p.name, p.ok, p.required, p.state, {}, None, p.elapsed_ms, p.warning, redacted=True)
                for p in self.parts
            ]
        )

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "status": "ok" if self.ok else "unavailable",
            "ok": self.ok,
            "warnings": [f"{p.name}: {p.warning}" for p in self.parts if p.warning],
            "parts": {p.name: {**asdict(p), "state": p.state} for p in self.parts},
        }


class Down(Exception):
    """A check's finding that its part is down, with the summary and detail to show anyway."""

    def __init__(self, error: str, summary: str = "down", detail: dict | None = None) -> None:
        super().__init__(error)
        self.summary, self.detail = summary, detail or {}


class NotConfigured(Exception):  # a finding, like Down
    """An optional part this deployment did not set up: neither up nor a failure."""

    def __init__(self, summary: str, detail: dict) -> None:
        super().__init__(summary)
        self.summary, self.detail = summary, detail


# A check returns (summary, detail) or (summary, detail, warning), and raises when its part is down.
Check = Callable[[], tuple[str, dict] | tuple[str, dict, str | None]]


def _timed(name: str, required: bool, check: Check) -> PartStatus:
    start = time.perf_counter()
    warning = None
    try:
        summary, detail, *rest = check()
        ok, error, warning = True, None, (rest[0] if rest else None)
    except Down as down:
        summary, detail, ok, error = down.summary, down.detail, False, str(down)
    except NotConfigured as absent:
        summary, detail, ok, error = absent.summary, absent.detail, None, None
    except Exception as exc:  # each failure becomes a red part, never a 500
        summary, detail, ok, error = "down", {}, False, f"{type(exc).__name__}: {exc}"
    elapsed = round((time.perf_counter() - start) * 1000, 1)
    return PartStatus(name, ok, required, summary, detail, error, elapsed, warning)


def check_database() -> tuple[str, dict]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return f"{connection.vendor} ok", {"vendor": connection.vendor}


def check_redis() -> tuple[str, dict]:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
        version = client.info("server").get("redis_version")
    finally:
        client.close()
    return f"redis {version} ok", {"version": version, "db": client.connection_pool.connection_kwargs.get("db", 0)}


def check_channel_layer() -> tuple[str, dict]:
    """A real send and receive through the configured layer (Redis in every deployment), on a
    layer instance of its own: the process's shared one belongs to the websocket consumers,
    whose receive loop (and its connections, after a Redis restart) must not decide whether the
    check passes; nor may the check's timeout disturb them."""
    import asyncio

    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    if DEFAULT_CHANNEL_LAYER not in getattr(settings, "CHANNEL_LAYERS", {}):
        raise RuntimeError("CHANNEL_LAYERS is not configured")
    layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    token = uuid.uuid4().hex

    async def round_trip() -> dict:
        try:
            channel = await layer.new_channel("healthz.")
            await layer.send(channel, {"type": "healthz.ping", "token": token})
            return await asyncio.wait_for(layer.receive(channel), timeout=5)
        finally:
            close = getattr(layer, "close_pools", None)
            if close is not None:
                await close()

    message = async_to_sync(round_trip)()
    if message.get("token") != token:
        raise RuntimeError("the channel layer returned another message")
    return f"{type(layer).__name__} round trip ok", {"backend": f"{type(layer).__module__}.{type(layer).__name__}"}


def live_workers_by_queue(timeout: float) -> dict[str, list[str]]:
    """Worker names per queue, from the workers that answer a broadcast within `timeout` seconds."""
    from webapp.celery import app

    # A connection of our own to the configured broker: fails fast when Redis is down, and follows
    # the settings (tests point them at another Redis database).
    with app.connection_for_write(url=settings.CELERY_BROKER_URL) as connection:
        connection.ensure_connection(max_retries=1, timeout=2)
        replies = app.control.inspect(timeout=timeout, connection=connection).active_queues() or {}
    by_queue: dict[str, list[str]] = {q.value: [] for q in Queue}
    for worker, queues in sorted(replies.items()):
        for queue in queues or []:
            by_queue.setdefault(queue["name"], []).append(worker)
    return by_queue


def worker_parts(timeout: float) -> list[PartStatus]:
    start = time.perf_counter()
    try:
        by_queue, error = live_workers_by_queue(timeout), None
    except Exception as exc:
        by_queue, error = {q.value: [] for q in Queue}, f"{type(exc).__name__}: {exc}"
    elapsed = round((time.perf_counter() - start) * 1000, 1)
    parts = []
    for queue in Queue:
        workers = by_queue.get(queue.value, [])
        ok = bool(workers)
        summary = f"{len(workers)} live: {', '.join(workers)}" if ok else "no live worker"
        parts.append(
            PartStatus(
                f"workers.{queue.value}",
                ok,
                True,
                summary,
                {"queue": queue.value, "workers": workers},
                error if error else (None if ok else f"no worker answered on queue {queue.value!r}"),
                elapsed,
            )
        )
    return parts


def check_sandbox() -> tuple[str, dict]:
    from webapp.core.backend import sandbox_backend

    info = sandbox_backend()
    if not info.ok:
        raise RuntimeError(info.error)
    summary = f"{info.backend}" + (f" ({info.gpu_name})" if info.gpu_name else "")
    return summary, info.to_dict()


def check_containment() -> tuple[str, dict, str | None]:
    """Whether this host can run untrusted code inside its wall (sandbox.containment, which
    starts one real sandbox per process, then remembers; it never imports torch). Red when it
    cannot: evaluations then refuse to run. Up with a warning when switched off on purpose."""
    from sandbox.containment import status

    st = status()
    detail = st.to_dict()
    if not st.ok:
        raise Down(f"{st.detail}. To enable: {st.how_to_enable}", f"{st.mode}: untrusted code will not run", detail)
    if st.mode == "uncontained":
        return (
            "UNCONTAINED",
            detail,
            (
                f"{st.detail}. Untrusted code (uploads, candidates) runs with this "
                "service's own rights: only for one person's own machine."
            ),
        )
    return st.mode, detail, None


def check_model_endpoint() -> tuple[str, dict]:
    """Configuration only (never the key, never a call to the model): calls cost money and time.
    Unset, it is not configured: jobs then run the built-in policy, which needs no endpoint."""
    base_url = settings.OPENAI_BASE_URL or ("https://api.openai.com/v1" if settings.OPENAI_API_KEY else "")
    configured = bool(base_url)
    detail = {
        "configured": configured,
        "base_url": base_url or None,
        "model": settings.KERNELWRIGHT_MODEL,
        "api_key_set": bool(settings.OPENAI_API_KEY),
    }
    if not configured:
        raise NotConfigured(
            "not configured: jobs run the built-in offline policy (set OPENAI_BASE_URL to use a model)", detail
        )
    return f"{settings.KERNELWRIGHT_MODEL} at {base_url}", detail


def collect_health(worker_timeout: float | None = None) -> HealthReport:
    timeout = settings.HEALTH_WORKER_TIMEOUT if worker_timeout is None else worker_timeout
    parts = [
        _timed("database", True, check_database),
        _timed("redis", True, check_redis),
        _timed("channel_layer", True, check_channel_layer),
        *worker_parts(timeout),
        _timed("sandbox", False, check_sandbox),
        _timed("sandbox.containment", True, check_containment),
        _timed("model_endpoint", False, check_model_endpoint),
    ]
    return HealthReport(parts)
