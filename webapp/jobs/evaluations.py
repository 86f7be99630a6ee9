"""Asynchronous batched evaluation (POST /api/evaluations): for RL rollouts, many candidates of one
task evaluated on the gpu queue while the caller polls, or is called back.

No web thread waits on an evaluation. A POST checks the batch, the token's rate limit and daily
quota, and stores one `Evaluation` row per candidate (state `queued`); `dispatch` then sends a
user's queued rows to the gpu queue only while the user has a place there
(webapp.jobs.scheduler.reserve_gpu_slot: the per-user bound and the fair priority that jobs'
evaluations use too). The gpu worker (`run`) evaluates, stores the result, gives the place back,
dispatches the user's next rows and calls the batch's webhook. Dispatch also runs on every poll,
so rows left waiting by a worker that died before dispatching go out on the next poll.

Webhooks are notifications (notify, then fetch): a small JSON body with the id, state and reward
and the URL to poll, signed with the batch's secret (`X-Kernelwright-Signature: sha256=<hex HMAC
of the body>`). A webhook may reach only public addresses, checked when the batch is posted and
again, on the resolved address actually connected to, when it is called (no redirects), unless
KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS lists the private network.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import math
import secrets
import socket
import ssl
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sandbox.options import SANDBOX_OPTION_KEYS
from webapp.jobs import scheduler, services
from webapp.jobs.models import ApiToken, Evaluation, task_hash
from webapp.jobs.task_check import check_task_source
from webapp.queues import EVALUATE_CANDIDATE_TASK, worker_died_reason

logger = logging.getLogger(__name__)

MAX_FILES_BYTES = 1024 * 1024  # one candidate's files, as /api/evaluate
RATE_KEY = "kernelwright:evaluation-posts:{token}:{minute}"


def limit(name: str) -> Any:
    """A setting of this module (defined, with its default, in webapp/settings.py)."""
    return getattr(settings, name)


class Refused(Exception):
    """A POST that is not accepted: `status` 400 (bad input), 429 (over a limit, with
    `retry_after` seconds) or 503 (the queue's Redis does not answer)."""

    def __init__(self, status: int, message: str, errors: list[str] | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.errors, self.retry_after = status, message, errors or [], retry_after


@dataclass
class Submission:
    task: str
    candidates: list[dict[str, str]]
    options: dict[str, Any]
    webhook: str = ""


# -- the POST ------------------------------------------------------------------------------------------
def files_problem(files: Any) -> str:
    """Why these candidate files cannot be evaluated, or ""."""
    if (
        not isinstance(files, dict)
        or not files
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    ):
        return "`files` must be an object of relative path -> text"
    if sum(len(v.encode()) for v in files.values()) > MAX_FILES_BYTES:
        return f"the candidate files exceed {MAX_FILES_BYTES} bytes"
    if any(p.startswith("/") or ".." in p.split("/") for p in files):
        return "file paths must be relative and stay inside the workspace"
    return ""


def parse(body: dict[str, Any]) -> Submission:
    """{"task": source, "candidates": [{"files": {...}}, ...], "options": {...}, "webhook": url}"""
    task, candidates = body.get("task"), body.get("candidates")
    if not isinstance(task, str):
        raise Refused(400, "`task` must be the reference module source")
    check = check_task_source(task)
    if not check.ok:
        raise Refused(400, "invalid task", check.errors)
    most = int(limit("KERNELWRIGHT_EVALUATION_BATCH_MAX"))
    if not isinstance(candidates, list) or not 1 <= len(candidates) <= most:
        raise Refused(400, f'`candidates` must be a list of 1 to {most} objects {{"files": {{path: text}}}}')
    errors = [
        f"candidate {i}: {why}"
        for i, c in enumerate(candidates)
        if (why := files_problem(c.get("files") if isinstance(c, dict) else None))
    ]
    if errors:
        raise Refused(400, "invalid candidates", errors)
    try:
        opts = services.normalize_options(body.get("options") or {})
    except services.InvalidJob as exc:
        raise Refused(400, "invalid options", exc.errors) from exc
    webhook = body.get("webhook") or ""
    if webhook:
        try:
            check_webhook(str(webhook))
        except WebhookRefused as exc:
            raise Refused(400, f"webhook refused: {exc}") from exc
    return Submission(task, [c["files"] for c in candidates], {k: opts[k] for k in SANDBOX_OPTION_KEYS}, str(webhook))


def check_rate(token: ApiToken, count: int) -> None:
    """The token's POSTs per minute (Redis, a fixed window) and candidates per day (the table)."""
    per_day = int(limit("KERNELWRIGHT_EVALUATIONS_PER_DAY"))
    if count > per_day:
        raise Refused(400, f"a batch of {count} is more than a token's daily quota of {per_day} evaluations")
    now = time.time()
    key = RATE_KEY.format(token=token.key_hash[:24], minute=int(now // 60))
    try:
        client = scheduler.redis_client()
        try:
            with client.pipeline() as pipe:
                posts, _ = pipe.incr(key).expire(key, 120).execute()
        finally:
            client.close()
    except Exception as exc:  # nothing can be queued without Redis either
        raise Refused(503, "the evaluation queue does not answer; try again shortly", retry_after=5) from exc
    per_minute = int(limit("KERNELWRIGHT_EVALUATION_POSTS_PER_MINUTE"))
    if per_minute > 0 and posts > per_minute:
        raise Refused(
            429,
            f"more than {per_minute} evaluation requests in a minute with this token "
            "(KERNELWRIGHT_EVALUATION_POSTS_PER_MINUTE)",
            retry_after=max(1, math.ceil(60 - now % 60)),
        )
    since = timezone.now() - timedelta(days=1)
    recent = Evaluation.objects.filter(token=token, created_at__gte=since)
    used = recent.count()
    if used + count > per_day:
        oldest = recent.order_by("created_at").values_list("created_at", flat=True).first() or timezone.now()
        wait = max(1, math.ceil((oldest + timedelta(days=1) - timezone.now()).total_seconds()))
        raise Refused(
            429,
            f"this token has {used} evaluations in the last 24 hours; {count} more would pass its "
            f"daily quota of {per_day} (KERNELWRIGHT_EVALUATIONS_PER_DAY)",
            retry_after=wait,
        )


def submit(user, token: ApiToken | None, sub: Submission) -> list[Evaluation]:
    """Store the batch's rows; they are dispatched once the transaction commits."""
    batch, secret = uuid.uuid4().hex, secrets.token_hex(16) if sub.webhook else ""
    rows = [
        Evaluation(
            owner=user,
            token=token,
            batch=batch,
            index=i,
            task_source=sub.task,
            task_hash=task_hash(sub.task),
            files=files,
            options=sub.options,
            webhook_url=sub.webhook,
            webhook_secret=secret,
        )
        for i, files in enumerate(sub.candidates)
    ]
    with transaction.atomic():
        Evaluation.objects.bulk_create(rows)
        transaction.on_commit(lambda: dispatch_quietly(user.pk))
    return list(Evaluation.objects.filter(batch=batch).order_by("index"))


# -- the gpu queue -----------------------------------------------------------------------------------------
def dispatch(user_id: Any) -> int:
    """Send the user's queued, unsent rows (oldest first) while the user has a place on the gpu
    queue; returns how many went. A row sent longer ago than a gpu task may live (its message was
    lost with Redis, its place has aged out) is sent again under a new task id; should the old
    message still come, `run` ignores it (the row no longer carries its id)."""
    lost = timezone.now() - timedelta(seconds=float(getattr(settings, "CELERY_GPU_TIME_LIMIT", 1800)) + 600)
    Evaluation.objects.filter(owner_id=user_id, state=Evaluation.State.QUEUED, dispatched_at__lt=lost).update(
        task_id="", dispatched_at=None
    )
    sent = 0
    for pk in Evaluation.objects.filter(owner_id=user_id, state=Evaluation.State.QUEUED, task_id="").values_list(
        "pk", flat=True
    ):
        task_id = uuid.uuid4().hex
        try:
            priority = scheduler.reserve_gpu_slot(user_id, task_id, wait=False)
        except scheduler.TooManyEvaluations:
            break
        if not Evaluation.objects.filter(pk=pk, task_id="").update(task_id=task_id, dispatched_at=timezone.now()):
            scheduler.release_gpu_slot(user_id, task_id)  # another dispatcher took this row
            continue
        try:
            services.celery_app().send_task(EVALUATE_CANDIDATE_TASK, args=[pk], task_id=task_id, priority=priority)
        except Exception:
            Evaluation.objects.filter(pk=pk, task_id=task_id).update(task_id="", dispatched_at=None)
            scheduler.release_gpu_slot(user_id, task_id)
            raise
        sent += 1
    return sent


def dispatch_quietly(user_id: Any) -> None:
    try:
        dispatch(user_id)
    except Exception:  # Redis away: the next poll or finished evaluation dispatches again
        logger.exception("could not dispatch the evaluations of user %s", user_id)


def run(evaluation_id: int, task_id: str) -> None:
    """In the gpu worker: evaluate the row sent as `task_id` (again, if a worker died on it)."""
    from webapp.jobs.run.worker import evaluate_for_job

    claimed = Evaluation.objects.filter(
        pk=evaluation_id, task_id=task_id, state__in=(Evaluation.State.QUEUED, Evaluation.State.RUNNING)
    )
    if not claimed.update(state=Evaluation.State.RUNNING, started_at=timezone.now()):
        return  # finished already (a late redelivery), or not this task's row
    ev = Evaluation.objects.get(pk=evaluation_id)
    try:
        data = evaluate_for_job(ev.task_source, ev.files, ev.options, None, None, task_id)
    except Exception as exc:  # recorded on the row; the sandbox itself failed
        logger.exception("evaluation %s failed", evaluation_id)
        finish(evaluation_id, Evaluation.State.FAILED, reason=f"the evaluation failed: {type(exc).__name__}: {exc}")
        return
    finish(evaluation_id, Evaluation.State.DONE, result=data)


def worker_died(evaluation_id: int) -> None:
    finish(evaluation_id, Evaluation.State.FAILED, reason=worker_died_reason("evaluation"))


def finish(evaluation_id: int, state: str, result: dict[str, Any] | None = None, reason: str = "") -> None:
    """Store the outcome, give the gpu place back, send the user's next rows, call the webhook."""
    reward = result.get("reward") if result else None
    Evaluation.objects.filter(pk=evaluation_id).update(
        state=state, result=result, reward=reward, reason=reason, finished_at=timezone.now()
    )
    ev = Evaluation.objects.get(pk=evaluation_id)
    if ev.task_id:
        scheduler.release_gpu_slot(ev.owner_id, ev.task_id)
    dispatch_quietly(ev.owner_id)
    if ev.webhook_url:
        status = deliver(ev.webhook_url, notification(ev), ev.webhook_secret)
        Evaluation.objects.filter(pk=evaluation_id).update(webhook_status=status[:300])


# -- webhooks ---------------------------------------------------------------------------------------------
class WebhookRefused(ValueError):
    pass


def href(ev: Evaluation) -> str:
    return f"/api/evaluations/{ev.pk}"


def notification(ev: Evaluation) -> dict[str, Any]:
    status = (ev.result or {}).get("status")
    return {
        "id": ev.pk,
        "batch": ev.batch,
        "index": ev.index,
        "state": ev.state,
        "status": status,
        "reward": ev.reward,
        "reason": ev.reason,
        "href": href(ev),
    }


def _allowed(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    networks = [ipaddress.ip_network(n, strict=False) for n in limit("KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS")]
    if any(ip in n for n in networks if n.version == ip.version):
        return True
    return ip.is_global and not ip.is_multicast


def check_webhook(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, the address to connect to) of an acceptable webhook URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused(f"{url!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise WebhookRefused("credentials in the URL are not accepted; authenticate the call with its signature")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WebhookRefused(f"{parts.hostname} does not resolve ({exc})") from exc
    addresses = sorted({info[4][0] for info in infos})
    bad = [a for a in addresses if not _allowed(ipaddress.ip_address(a.split("%")[0]))]
    if bad:
        raise WebhookRefused(
            f"{parts.hostname} resolves to a private or reserved address ({', '.join(bad)}); "
            "only public addresses are called unless KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS lists it"
        )
    return parts.scheme, parts.hostname, port, addresses[0]


def _pinned_connection(scheme: str, host: str, port: int, ip: str, timeout: float) -> http.client.HTTPConnection:
    """A connection to the address that was checked (not a second lookup), with the URL's host
    in the Host header and, over https, in the TLS handshake and certificate check."""
    if scheme == "https":
        context = ssl.create_default_context()
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)

        def connect() -> None:
            conn.sock = context.wrap_socket(socket.create_connection((ip, port), timeout), server_hostname=host)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)

        def connect() -> None:
            conn.sock = socket.create_connection((ip, port), timeout)

    conn.connect = connect  # type: ignore[method-assign]
    return conn


def deliver(url: str, payload: dict[str, Any], secret: str) -> str:
    """POST the payload; returns the HTTP status, or why it was not delivered. Never raises."""
    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    try:
        scheme, host, port, ip = check_webhook(url)
        parts = urlsplit(url)
        conn = _pinned_connection(scheme, host, port, ip, float(limit("KERNELWRIGHT_WEBHOOK_TIMEOUT_S")))
        try:
            conn.request(
                "POST",
                (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                body=body,
                headers={
                    "Content-Type": "application/json",
                    "User-Agent": "kernelwright-webhook",
                    "X-Kernelwright-Signature": signature,
                },
            )
            return str(conn.getresponse().status)
        finally:
            conn.close()
    except WebhookRefused as exc:
        return f"refused: {exc}"
    except (OSError, http.client.HTTPException) as exc:
        return f"not delivered: {type(exc).__name__}: {exc}"
