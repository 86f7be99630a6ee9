"""Who runs next, and what happens to a job whose worker is gone.

**The fair queue (agent).** A new job is a `queued` row in the database, not yet a message: the
database is the queue, so losing Redis loses no job. `dispatch()` hands queued jobs to the
agent queue only while agent slots are free (the live agent workers' concurrency, which each
registers in Redis), in a fair order between users (the user with the fewest jobs running goes
first, their oldest job first), and never more than KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER of one
user's at once. Every job still waiting is told where it waits and why (`Job.step` and
`Job.reason`, on the job page and in the API). It runs after each new job, after each job ends,
and every few seconds in each agent worker's monitor.

**Heartbeats (lost agent workers).** A worker starts a job only by claiming it (`claim`: queued,
or running with a stale heartbeat; so a redelivered message never starts a second run), then its
run writes `Job.heartbeat_at` every KERNELWRIGHT_HEARTBEAT_S. The monitor (`reap`) takes a job
whose heartbeat is older than KERNELWRIGHT_HEARTBEAT_STALE_S back to the queue, to resume from
its stored turns (its checkpoint), or after MAX_ATTEMPTS starts fails it with the reason. A job
handed to the agent queue but not started in KERNELWRIGHT_DISPATCH_TIMEOUT_S (its message was lost
with Redis) is handed over again. The Celery message of a dead worker is redelivered only after
the broker's visibility timeout, and is then dropped by the claim.

**The fair order on the gpu queue.** Each evaluation or profile is sent with a priority from the
number of its user's evaluations already queued or running (0 for the first, 3, 6, then 9; the
Redis transport serves lower numbers first), so one user's hundred evaluations queue behind
everyone else's first, and a user may have at most KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER
outstanding (a job's run waits for a place, the API answers 429).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from webapp.jobs.models import Job
from webapp.queues import MAX_DELIVERIES, RUN_JOB_TASK

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = MAX_DELIVERIES  # starts of one job (first run + resumes after lost workers)
SLOTS_KEY = "kernelwright:agent-slots:"  # + worker hostname -> its concurrency, expiring
OUTSTANDING_KEY = "kernelwright:gpu-outstanding:"  # + user id -> sorted set of task ids by send time
PRIORITY_STEPS = (0, 3, 6, 9)


def setting(name: str, default: float) -> float:
    return getattr(settings, name, default)


def heartbeat_s() -> float:
    return setting("KERNELWRIGHT_HEARTBEAT_S", 5.0)


def stale_s() -> float:
    return setting("KERNELWRIGHT_HEARTBEAT_STALE_S", 30.0)


def redis_client():
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


# -- agent capacity ------------------------------------------------------------------------------
def register_slots(hostname: str, concurrency: int, ttl_s: float) -> None:
    client = redis_client()
    try:
        client.set(SLOTS_KEY + hostname, concurrency, ex=max(1, int(ttl_s)))
    finally:
        client.close()


def agent_slots() -> int | None:
    """Agent slots of the live workers (KERNELWRIGHT_AGENT_SLOTS when set); None: Redis unreachable."""
    fixed = int(setting("KERNELWRIGHT_AGENT_SLOTS", 0))
    if fixed > 0:
        return fixed
    try:
        client = redis_client()
        try:
            keys = list(client.scan_iter(SLOTS_KEY + "*", count=100))
            return sum(int(v) for v in client.mget(keys) if v is not None) if keys else 0
        finally:
            client.close()
    except Exception:  # Redis down: nothing can be sent anyway
        logger.warning("agent slots unknown: Redis does not answer")
        return None


# -- dispatch --------------------------------------------------------------------------------------
def _owner_label(job: Job) -> str:
    return job.owner.get_username() if job.owner_id and job.owner else "this user"


@dataclass
class Plan:
    send: list[Job]
    waits: dict[int, tuple[str, str]]  # job id -> (step, reason)


def plan(queued: list[Job], active_by_owner: dict[Any, int], free: int | None, slots: int | None) -> Plan:
    """The fair order: repeatedly the owner with the fewest jobs active (running or handed to the
    queue) takes their oldest queued job; an owner at the per-user limit waits. Pure, for tests."""
    limit = int(setting("KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER", 2))
    active = dict(active_by_owner)
    by_owner: dict[Any, list[Job]] = {}
    for job in sorted(queued, key=lambda j: (j.created_at, j.pk)):
        by_owner.setdefault(job.owner_id, []).append(job)
    order: list[Job] = []
    held: list[Job] = []
    while by_owner:
        owner = min(by_owner, key=lambda o: (active.get(o, 0), by_owner[o][0].created_at, by_owner[o][0].pk))
        job = by_owner[owner].pop(0)
        if not by_owner[owner]:
            del by_owner[owner]
        if limit > 0 and active.get(owner, 0) >= limit:
            held.append(job)
            continue
        active[owner] = active.get(owner, 0) + 1
        order.append(job)
    budget = max(0, free) if free is not None else 0
    send, waits = order[:budget], {}
    for position, job in enumerate(order[budget:], start=1):
        if slots is None:
            why = "the queue's Redis does not answer; the job is handed to the agent queue when it does"
        elif slots == 0:
            why = "no agent worker is running (see /health/); the job starts when one is"
        else:
            why = (
                f"all {slots} agent slots are busy; {position - 1} job(s) are ahead of it in the fair order "
                "between users (whoever has the fewest jobs running goes first)"
            )
        waits[job.pk] = (f"queued: position {position} for a free agent slot", why)
    for job in held:
        waits[job.pk] = (
            "queued: waiting for one of your running jobs to end",
            f"{_owner_label(job)} already has {limit} job(s) running, the most one user may run at once "
            f"(KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER={limit}); it starts when one of them ends",
        )
    return Plan(send, waits)


def dispatch() -> int:
    """Hand queued jobs to the agent queue as the fair order and the free slots allow; tell every
    other queued job why it waits. Returns how many were handed over."""
    from webapp.jobs import services

    slots = agent_slots()
    with transaction.atomic():
        _yield_to_lock_holders()
        queued = list(
            Job.objects.select_for_update(of=("self",))
            .filter(state=Job.State.QUEUED, cancel_requested=False, scheduled=True, dispatched_at__isnull=True)
            .select_related("owner")
        )
        if not queued:
            return 0
        active_rows = Job.objects.filter(
            Q(state=Job.State.RUNNING) | Q(state=Job.State.QUEUED, dispatched_at__isnull=False)
        )
        active_by_owner: dict[Any, int] = {}
        for owner_id in active_rows.values_list("owner_id", flat=True):
            active_by_owner[owner_id] = active_by_owner.get(owner_id, 0) + 1
        free = None if slots is None else slots - sum(active_by_owner.values())
        result = plan(queued, active_by_owner, free, slots)
        now = timezone.now()
        for job in result.send:
            Job.objects.filter(pk=job.pk).update(
                dispatched_at=now,
                step="queued: handed to the agent queue",
                reason="a worker takes it in a moment",
                updated_at=now,
            )
        for job in queued:
            if job.pk in result.waits:
                step, reason = result.waits[job.pk]
                services.tell_waiting(job, step, reason)
    sent = 0
    for job in result.send:
        try:
            services.celery_app().send_task(RUN_JOB_TASK, args=[job.pk])
            sent += 1
        except Exception:  # Redis down: the job goes back to waiting, sent again later
            logger.exception("could not hand job %s to the agent queue", job.pk)
            Job.objects.filter(pk=job.pk, state=Job.State.QUEUED).update(dispatched_at=None)
    for job in result.send:
        services.announce_state(job.pk, Job.State.QUEUED, "a worker takes it in a moment")
    return sent


DISPATCH_LOCK_TIMEOUT = "250ms"


def _yield_to_lock_holders() -> None:
    """The dispatch's transaction locks queued rows and reads their owners; a statement that locks
    those tables the other way round (a flush, a migration, an admin's bulk delete) would
    deadlock with it. On PostgreSQL the dispatch waits at most DISPATCH_LOCK_TIMEOUT for a lock
    and gives up, well before the server's deadlock check (1 s) could abort the other side; the
    monitor dispatches again in a few seconds. SQLite takes one lock for the whole file."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{DISPATCH_LOCK_TIMEOUT}'")


def dispatch_quietly() -> None:
    try:
        dispatch()
    except Exception:  # the monitor dispatches again in a few seconds
        logger.exception("dispatch failed")


# -- claims and heartbeats ---------------------------------------------------------------------------
def claim(job_id: int) -> Job | None:
    """Start (or resume) a job in this worker: only a queued job, or a running one whose heartbeat
    is stale (its worker is gone). None when another live attempt holds it or it has ended."""
    now = timezone.now()
    stale = now - timedelta(seconds=stale_s())
    changed = Job.objects.filter(
        Q(state=Job.State.QUEUED)
        | Q(state=Job.State.RUNNING, heartbeat_at__isnull=True)
        | Q(state=Job.State.RUNNING, heartbeat_at__lt=stale),
        pk=job_id,
        cancel_requested=False,
    ).update(
        state=Job.State.RUNNING,
        attempts=F("attempts") + 1,
        heartbeat_at=now,
        dispatched_at=None,
        step="starting",
        reason="",
        updated_at=now,
    )
    if not changed:
        return None
    return Job.objects.get(pk=job_id)


def beat(job_id: int, attempt: int) -> bool:
    """This attempt is alive; False when it no longer owns the job (superseded, ended)."""
    return bool(
        Job.objects.filter(pk=job_id, attempts=attempt, state=Job.State.RUNNING).update(heartbeat_at=timezone.now())
    )


def is_current(job_id: int, attempt: int) -> bool:
    """Whether work for this attempt of the job is still wanted (the gpu worker asks)."""
    stale = timezone.now() - timedelta(seconds=stale_s())
    return Job.objects.filter(pk=job_id, attempts=attempt, state=Job.State.RUNNING, heartbeat_at__gte=stale).exists()


class Heartbeat:
    """A thread writing the attempt's heartbeat; `lost` once the attempt no longer owns the job."""

    def __init__(self, job_id: int, attempt: int) -> None:
        self.job_id, self.attempt = job_id, attempt
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from django.db import connection

        try:
            while not self._stop.wait(heartbeat_s()):
                try:
                    if not beat(self.job_id, self.attempt):
                        self.lost = True
                        logger.warning(
                            "job %s: attempt %s no longer owns the job; stopping it", self.job_id, self.attempt
                        )
                        return
                except Exception:  # a database hiccup: try again next beat
                    logger.exception("job %s: heartbeat failed", self.job_id)
        finally:
            connection.close()


# -- the monitor: lost workers, lost messages -----------------------------------------------------
def reap() -> list[int]:
    """Jobs whose worker is gone: back to the queue to resume from their stored turns, or failed
    after MAX_ATTEMPTS starts. Jobs handed to the queue whose message never started: handed over
    again. Returns the ids of the jobs it changed."""
    from webapp.jobs import services

    now = timezone.now()
    stale = now - timedelta(seconds=stale_s())
    changed = []
    for job in Job.objects.filter(state=Job.State.RUNNING, heartbeat_at__lt=stale):
        last = job.heartbeat_at.strftime("%H:%M:%S UTC")
        turns = job.turns.count()
        if job.attempts >= MAX_ATTEMPTS:
            reason = (
                f"the worker running this job stopped answering (last heartbeat {last}), "
                f"the {job.attempts}th start to end that way; the job was stopped"
            )
            if Job.objects.filter(pk=job.pk, state=Job.State.RUNNING, heartbeat_at=job.heartbeat_at).exists():
                services.finish_job(job, Job.State.FAILED, reason)
                changed.append(job.pk)
            continue
        reason = (
            f"its agent worker stopped answering (last heartbeat {last}); it resumes from its "
            f"{turns} stored turn(s) (start {job.attempts + 1} of at most {MAX_ATTEMPTS})"
        )
        if Job.objects.filter(pk=job.pk, state=Job.State.RUNNING, heartbeat_at=job.heartbeat_at).update(
            state=Job.State.QUEUED,
            dispatched_at=None,
            step="queued: resuming after a lost worker",
            reason=reason,
            updated_at=now,
        ):
            logger.warning("job %s: %s", job.pk, reason)
            services.announce_state(job.pk, Job.State.QUEUED, reason)
            changed.append(job.pk)
    late = now - timedelta(seconds=setting("KERNELWRIGHT_DISPATCH_TIMEOUT_S", 60.0))
    for pk in Job.objects.filter(state=Job.State.QUEUED, dispatched_at__lt=late).values_list("pk", flat=True):
        if Job.objects.filter(pk=pk, state=Job.State.QUEUED, dispatched_at__lt=late).update(dispatched_at=None):
            logger.warning("job %s: handed to the agent queue but not started: handing it over again", pk)
            changed.append(pk)
    return changed


class Monitor:
    """In each agent worker's main process: every few seconds register this worker's slots,
    reap lost jobs and dispatch. Every step tolerates a database or Redis that does not answer."""

    def __init__(self, hostname: str, concurrency: int, interval_s: float | None = None) -> None:
        self.hostname, self.concurrency = hostname, concurrency
        self.interval_s = interval_s or setting("KERNELWRIGHT_MONITOR_INTERVAL_S", 5.0)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kernelwright-monitor", daemon=True)

    def start(self) -> Monitor:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> None:
        for step in (lambda: register_slots(self.hostname, self.concurrency, 3 * self.interval_s + 5), reap, dispatch):
            try:
                step()
            except Exception:  # next tick
                logger.exception("monitor step failed")

    def _run(self) -> None:
        from django.db import connection

        while True:
            self.tick()
            connection.close()
            if self._stop.wait(self.interval_s):
                return


def default_hostname() -> str:
    return f"agent@{socket.gethostname()}:{os.getpid()}"


# -- the gpu queue: fair order and a per-user bound -----------------------------------------------------
class TooManyEvaluations(Exception):
    def __init__(self, outstanding: int, limit: int) -> None:
        super().__init__(
            f"{outstanding} evaluations of yours are queued or running, the most one user may have "
            f"(KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER={limit}); try again when one has finished"
        )
        self.outstanding, self.limit = outstanding, limit


def outstanding(client, user_key: str) -> int:
    key = OUTSTANDING_KEY + user_key
    horizon = time.time() - setting("CELERY_GPU_TIME_LIMIT", 1800) - 600
    client.zremrangebyscore(key, "-inf", horizon)  # entries of work that was lost without a goodbye
    return int(client.zcard(key))


def gpu_priority(count: int) -> int:
    return PRIORITY_STEPS[min(count, len(PRIORITY_STEPS) - 1)]


def reserve_gpu_slot(user_id: Any, task_id: str, wait: bool, on_wait=None, deadline: float | None = None) -> int:
    """Count one more outstanding gpu task of the user; returns its priority. Over the limit:
    TooManyEvaluations, or with `wait` poll until a place is free (calling `on_wait(message)`)."""
    limit = int(setting("KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER", 4))
    user_key = str(user_id if user_id is not None else "anonymous")
    client = redis_client()
    try:
        told = False
        while True:
            count = outstanding(client, user_key)
            if limit <= 0 or count < limit:
                client.zadd(OUTSTANDING_KEY + user_key, {task_id: time.time()})
                client.expire(OUTSTANDING_KEY + user_key, int(setting("CELERY_GPU_TIME_LIMIT", 1800)) + 3600)
                return gpu_priority(count)
            refusal = TooManyEvaluations(count, limit)
            if not wait or (deadline is not None and time.monotonic() > deadline):
                raise refusal
            if on_wait and not told:
                on_wait(f"waiting: {refusal}")
                told = True
            time.sleep(1.0)
    finally:
        client.close()


def release_gpu_slot(user_id: Any, task_id: str) -> None:
    try:
        client = redis_client()
        try:
            client.zrem(OUTSTANDING_KEY + str(user_id if user_id is not None else "anonymous"), task_id)
        finally:
            client.close()
    except Exception:  # the entry ages out
        logger.warning("could not release gpu slot of task %s", task_id)
