"""What the compile and gpu workers do for a job: call the sandbox directly on their own host
(the backend resolved here), report its progress (webapp.jobs.run.progress) and give up work no
longer wanted.

Progress goes to the task's progress key, which the job's sender relays to the agent loop: this
module writes nothing of the job. An evaluation no longer wanted (its attempt was lost or ended,
or its sender gave it up and sent it again) is abandoned: not started at all, or stopped within
seconds (`watched`; the sandbox kills its children on the way out).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from webapp.jobs import scheduler
from webapp.jobs.run import outcomes, progress
from webapp.queues import abandoned_key

logger = logging.getLogger(__name__)
RECHECK_S = 2.0  # how often a running evaluation asks whether it is still wanted
DEVICE_PROBE_S = 1.0  # how often a running evaluation looks whether another one's timing holds the device


class Abandoned(BaseException):  # a BaseException: the sandbox swallows Exceptions from progress callbacks
    """The evaluation is no longer wanted: unwinds through the sandbox, which kills its children."""


def _redis() -> Any:
    from webapp.celery import app, redis_client

    return redis_client(app.conf.broker_url)


def unwanted(task_id: str | None, job_id: int | None, attempt: int | None) -> str:
    """Why this task should not run (or run on), or "" when it is wanted."""
    if task_id:
        try:
            if _redis().exists(abandoned_key(task_id)):
                return "abandoned: its sender gave it up (its worker was thought lost) and sent it again"
        except Exception:  # Redis restarting: go on
            pass
    if job_id is not None and attempt is not None:
        if not scheduler.is_current(job_id, attempt):
            return f"abandoned: attempt {attempt} of job {job_id} no longer runs it"
    return ""


@contextlib.contextmanager
def watched(task_id: str | None, job_id: int | None, attempt: int | None) -> Iterator[None]:
    """While the evaluation runs, a thread asks every RECHECK_S whether it is still wanted; when
    not, it interrupts the task's (main) thread with SIGUSR2, whose handler raises Abandoned
    there: a long phase without progress reports (baselines, timing) stops within seconds too."""
    if (job_id is None or attempt is None) and not task_id or threading.current_thread() is not threading.main_thread():
        yield
        return
    reason: list[str] = []
    stop = threading.Event()
    main = threading.main_thread().ident
    assert main is not None

    def interrupt(signum: int, frame: Any) -> None:
        if reason and not stop.is_set():
            stop.set()
            raise Abandoned(reason[0])

    def watch() -> None:
        while not stop.wait(RECHECK_S):
            why = unwanted(task_id, job_id, attempt)
            if why:
                reason.append(why)
                signal.pthread_kill(main, signal.SIGUSR2)
                return

    previous = signal.signal(signal.SIGUSR2, interrupt)
    try:
        with _beside(watch, stop, f"watch-{task_id}", RECHECK_S):
            yield
    finally:
        signal.signal(signal.SIGUSR2, previous)


@contextlib.contextmanager
def _beside(watch: Callable[[], None], stop: threading.Event, name: str, every_s: float) -> Iterator[None]:
    """`watch` runs in a daemon thread while the block runs; `stop` is set and the thread joined
    after it (within its period, `every_s`, plus a margin)."""
    thread = threading.Thread(target=watch, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 5)


# Steps in which the evaluation's children take the device lock shared (sandbox.devlock): while
# another evaluation's timed loop holds it exclusively, they wait, and the page says so. (From
# "timing" on, this evaluation's own timing may hold it: a probe cannot tell whose it is.)
SHARED_LOCK_STEPS = {"starting", "reference", "import", "baseline", "baselines", "correctness", "judging"}


class StepState:
    """The evaluation's last reported step, and whether the page now shows the device wait."""

    def __init__(self) -> None:
        self.step: str = ""
        self.detail: dict[str, Any] = {}
        self.waiting = False


def sandbox_progress(
    report: progress.Report,
    state: StepState,
    task_id: str | None = None,
    job_id: int | None = None,
    attempt: int | None = None,
) -> progress.Report:
    """The sandbox's on_progress: remembers the step (for the device-wait probe), reports it, and
    every RECHECK_S asks whether the evaluation is still wanted (raising Abandoned when not)."""
    checked = [time.monotonic()]

    def on_progress(step: str, detail: dict[str, Any] | None = None) -> None:
        if step != "done" and time.monotonic() - checked[0] >= RECHECK_S:
            checked[0] = time.monotonic()
            why = unwanted(task_id, job_id, attempt)
            if why:
                raise Abandoned(why)
        state.step, state.detail, state.waiting = step, dict(detail or {}), False
        report(step, state.detail)

    return on_progress


@contextlib.contextmanager
def device_wait_shown(
    report: progress.Report, backend: str, state: StepState, folder: str | None = None
) -> Iterator[None]:
    """While the evaluation runs, a thread probes the device lock every DEVICE_PROBE_S: in a
    step that needs it shared, held exclusively means another evaluation's timing runs and this
    one waits, so it reports "device_wait" until the lock is free again, then its own step."""
    from sandbox.devlock import held_exclusively, host_lock_name, lock_dir

    name = host_lock_name(backend)
    if name is None:
        yield
        return
    stop = threading.Event()

    def watch() -> None:
        try:
            while not stop.wait(DEVICE_PROBE_S):
                busy = state.step in SHARED_LOCK_STEPS and held_exclusively(name, folder or lock_dir())
                if busy != state.waiting:
                    state.waiting = busy
                    report(*(("device_wait", {}) if busy else (state.step, state.detail)))
        except Exception:  # the label is a courtesy; the evaluation goes on
            logger.exception("device-wait probe stopped")

    with _beside(watch, stop, "device-wait", DEVICE_PROBE_S):
        yield


def host_backend(requested: str = "auto") -> str:
    """The backend an evaluation asking for `requested` runs on in this worker: the sandbox's one
    rule (sandbox.options.resolve_backend) with this worker's KERNELWRIGHT_BACKEND. "auto" is
    resolved here, on the host that evaluates, never on the agent worker that asks."""
    from django.conf import settings

    from sandbox.options import resolve_backend

    return resolve_backend(requested or "auto", settings.KERNELWRIGHT_BACKEND)


def _options(options: dict[str, Any]) -> Any:
    """The sandbox's options with the backend resolved on this host (host_backend)."""
    from sandbox.options import EvalOptions

    return EvalOptions.from_dict({**options, "backend": host_backend(str(options.get("backend") or "auto"))})


def _reporter(task_id: str | None, job_id: int | None) -> progress.Report:
    """Where this task's progress goes: its progress key when a job waits for it, else nowhere."""
    if task_id and job_id is not None:
        return progress.reporter(_redis(), task_id)
    return lambda step, detail: None


def build_for_job(
    files: dict[str, str],
    options: dict[str, Any],
    job_id: int | None,
    attempt: int | None = None,
    task_id: str | None = None,
) -> dict[str, Any]:
    """A candidate's build on a compile worker, unless no longer wanted."""
    from sandbox import EvalOptions, compile_candidate

    why = unwanted(task_id, job_id, attempt)
    if why:
        return outcomes.failed_build(why)
    return compile_candidate(files, EvalOptions.from_dict(dict(options))).to_dict()


def evaluate_for_job(
    task_source: str,
    files: dict[str, str],
    options: dict[str, Any],
    job_id: int | None,
    attempt: int | None = None,
    task_id: str | None = None,
) -> dict[str, Any]:
    """One evaluation on a gpu worker, its progress reported, stopped when no longer wanted."""
    from sandbox import evaluate

    def run() -> dict[str, Any]:
        opts = _options(options)
        report, state = _reporter(task_id, job_id), StepState()
        on_progress = sandbox_progress(report, state, task_id, job_id, attempt) if job_id is not None else None
        shown = device_wait_shown(report, opts.backend, state) if job_id is not None else contextlib.nullcontext()
        with shown:
            return evaluate(task_source, files, opts, on_progress=on_progress).to_dict()

    return _while_wanted("evaluation", task_id, job_id, attempt, run)


def profile_for_job(
    task_source: str,
    files: dict[str, str],
    options: dict[str, Any],
    job_id: int | None,
    attempt: int | None = None,
    task_id: str | None = None,
) -> dict[str, Any]:
    """One profile on a gpu worker (an evaluation with the profiler's table and the roofline)."""
    from sandbox import profile_candidate

    def run() -> dict[str, Any]:
        _reporter(task_id, job_id)("profile", {})
        return profile_candidate(task_source, files, _options(options)).to_dict()

    return _while_wanted("profile", task_id, job_id, attempt, run)


def _while_wanted(
    what: str, task_id: str | None, job_id: int | None, attempt: int | None, run: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """`run()` under the watch that stops it once this attempt is no longer wanted (`watched`);
    a failed evaluation saying why when it is not wanted to begin with, or stops."""
    why = unwanted(task_id, job_id, attempt)
    if why:
        return outcomes.failed_evaluation(why)
    try:
        with watched(task_id, job_id, attempt):
            return run()
    except Abandoned as stop:
        logger.warning("%s %s of job %s stopped: %s", what, task_id, job_id, stop)
        return outcomes.failed_evaluation(str(stop))
