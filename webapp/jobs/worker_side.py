"""What the compile and gpu workers do around a sandbox call: resolve the backend on their own
host, report progress to the job's viewers, give up work no longer wanted.

Progress from the sandbox ("correctness", {"trial": 3, "of": 5}) becomes the job's current
step ("checking correctness 3/5") through services.set_step, which writes and announces, and
only while the job's attempt that asked for the evaluation still runs it (`attempt`): the
progress of a lost attempt never shows on the resumed one. An evaluation no longer wanted (its
attempt was lost or ended, or its sender gave it up and sent it again) is abandoned: not started
at all, or stopped within seconds (`watched`; the sandbox kills its children on the way out).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
import time
from typing import Any

from webapp.jobs import scheduler, services
from webapp.queues import abandoned_key, worker_died_reason

logger = logging.getLogger(__name__)
RECHECK_S = 2.0  # how often a running evaluation asks whether it is still wanted


class Abandoned(BaseException):  # noqa: N818 - a BaseException: the sandbox swallows Exceptions from progress callbacks
    """The evaluation is no longer wanted: unwinds through the sandbox, which kills its children."""


def unwanted(task_id: str | None, job_id: int | None, attempt: int | None) -> str:
    """Why this task should not run (or run on), or "" when it is wanted."""
    if task_id:
        try:
            from webapp.celery import app, redis_client

            if redis_client(app.conf.broker_url).exists(abandoned_key(task_id)):
                return "abandoned: its sender gave it up (its worker was thought lost) and sent it again"
        except Exception:  # noqa: BLE001 - Redis restarting: go on
            pass
    if job_id is not None and attempt is not None:
        if not scheduler.is_current(job_id, attempt):
            return f"abandoned: attempt {attempt} of job {job_id} no longer runs it"
    return ""


@contextlib.contextmanager
def watched(task_id: str | None, job_id: int | None, attempt: int | None):
    """While the evaluation runs, a thread asks every RECHECK_S whether it is still wanted; when
    not, it interrupts the task's (main) thread with SIGUSR2, whose handler raises Abandoned
    there: a long phase without progress reports (baselines, timing) stops within seconds too."""
    if (job_id is None or attempt is None) and not task_id or threading.current_thread() is not threading.main_thread():
        yield
        return
    reason: list[str] = []
    stop = threading.Event()
    main = threading.main_thread().ident

    def interrupt(signum, frame) -> None:
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
    watcher = threading.Thread(target=watch, name=f"watch-{task_id}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=RECHECK_S + 5)
        signal.signal(signal.SIGUSR2, previous)


def abandoned_result(why: str) -> dict[str, Any]:
    from sandbox.schema import EvalResult, Status, Verdict

    return EvalResult(status=Status.RUNTIME_ERROR, verdict=Verdict.FAIL, reasons=[why]).to_dict()

DEVICE_WAIT = "waiting for the device (another evaluation is being timed)"
STEP_WORDS = {
    "device_wait": DEVICE_WAIT,
    "compile": "compiling",
    "compiling": "compiling",
    "starting": "starting the sandbox",
    "reference": "running the reference",
    "roofline": "measuring the roofline",
    "done": "evaluated",
    "baseline": "preparing the baselines",  # timing sets on the device, torch.compile's first call (compiles)
    "baselines": "preparing the baselines",
    "import": "importing the candidate",
    "correctness": "checking correctness",
    "judging": "comparing outputs",
    "timing": "timing",
    "audit": "auditing",
    "profile": "profiling",
    "profiling": "profiling",
    "teardown": "stopping the sandbox",
}


def _counted(words: str, detail: dict[str, Any] | None) -> str:
    detail = detail or {}
    index = detail.get("trial", detail.get("index", detail.get("i")))
    total = detail.get("of", detail.get("total", detail.get("n")))
    if isinstance(index, int) and isinstance(total, int):
        return f"{words} {index}/{total}"
    return words


def step_text(step: str, detail: dict[str, Any] | None) -> str:
    words = STEP_WORDS.get(step, step.replace("_", " "))
    if step in ("baseline", "baselines") and (detail or {}).get("compile"):
        words += " (building torch.compile)"
    return _counted(words, detail)


# Steps in which the evaluation's children take the device lock shared (sandbox.devlock): while
# another evaluation's timed loop holds it exclusively, they wait, and the page says so. (From
# "timing" on, this evaluation's own timing may hold it: a probe cannot tell whose it is.)
SHARED_LOCK_STEPS = {"starting", "reference", "import", "baseline", "baselines", "correctness", "judging"}
DEVICE_PROBE_S = 1.0


class StepState:
    """The evaluation's last reported step, and whether the page now shows the device wait."""

    def __init__(self) -> None:
        self.step, self.text, self.waiting = "", "", False


def _progress(job_id: int | None, attempt: int | None = None, task_id: str | None = None, state: StepState | None = None):
    if job_id is None:
        return None
    checked = [time.monotonic()]

    def on_progress(step: str, detail: dict[str, Any] | None = None) -> None:
        if step != "done" and time.monotonic() - checked[0] >= RECHECK_S:
            checked[0] = time.monotonic()
            why = unwanted(task_id, job_id, attempt)
            if why:
                raise Abandoned(why)
        text = step_text(step, detail)
        if state is not None:
            state.step, state.text, state.waiting = step, text, False
        services.set_step(job_id, text, attempt)

    return on_progress


@contextlib.contextmanager
def device_wait_shown(job_id: int | None, attempt: int | None, backend: str, state: StepState, folder: str | None = None):
    """While the evaluation runs, a thread probes the device lock every DEVICE_PROBE_S: in a
    step that needs it shared, held exclusively means another evaluation's timing runs and
    this one waits, so the job's step reads DEVICE_WAIT until the lock is free again."""
    from sandbox.devlock import LOCK_DIR, held_exclusively, host_lock_name

    name = host_lock_name(backend)
    if job_id is None or name is None:
        yield
        return
    stop = threading.Event()

    def watch() -> None:
        from django.db import connection

        try:
            while not stop.wait(DEVICE_PROBE_S):
                busy = state.step in SHARED_LOCK_STEPS and held_exclusively(name, folder or LOCK_DIR)
                if busy != state.waiting:
                    state.waiting = busy
                    services.set_step(job_id, DEVICE_WAIT if busy else state.text, attempt)
        except Exception:  # noqa: BLE001 - the label is a courtesy; the evaluation goes on
            logger.exception("device-wait probe of job %s stopped", job_id)
        finally:
            connection.close()

    watcher = threading.Thread(target=watch, name=f"device-wait-{job_id}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=DEVICE_PROBE_S + 5)


def host_backend(requested: str = "auto") -> str:
    """The backend an evaluation asking for `requested` runs on in this worker: the sandbox's one
    rule (sandbox.options.resolve_backend) with this worker's KERNELWRIGHT_BACKEND. "auto" is
    resolved here, on the host that evaluates, never on the agent worker that asks."""
    from django.conf import settings

    from sandbox.options import resolve_backend

    return resolve_backend(requested or "auto", settings.KERNELWRIGHT_BACKEND)


def on_this_host(options: dict[str, Any]) -> dict[str, Any]:
    """The options with their backend resolved here (host_backend)."""
    return {**options, "backend": host_backend(str(options.get("backend") or "auto"))}


def build_for_job(files: dict[str, str], options: dict[str, Any], job_id: int | None, attempt: int | None = None,
                  task_id: str | None = None) -> dict[str, Any]:
    """A candidate's build on a compile worker, unless no longer wanted."""
    from agent.evaluator import LocalEvaluator

    why = unwanted(task_id, job_id, attempt)
    if why:
        return {**worker_died_build(), "log": why}
    return dataclasses.asdict(LocalEvaluator().compile("", files, options))


def evaluate_for_job(task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None,
                     attempt: int | None = None, task_id: str | None = None) -> dict[str, Any]:
    from agent.evaluator import LocalEvaluator

    why = unwanted(task_id, job_id, attempt)
    if why:
        return abandoned_result(why)
    options = on_this_host(options)
    state = StepState()
    try:
        with watched(task_id, job_id, attempt), device_wait_shown(job_id, attempt, options["backend"], state):
            result = LocalEvaluator().evaluate(task_source, files, options, on_progress=_progress(job_id, attempt, task_id, state))
    except Abandoned as stop:
        logger.warning("evaluation %s of job %s stopped: %s", task_id, job_id, stop)
        return abandoned_result(str(stop))
    return result.to_dict()


def profile_for_job(task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None,
                    attempt: int | None = None, task_id: str | None = None) -> dict[str, Any]:
    from agent.evaluator import LocalEvaluator

    why = unwanted(task_id, job_id, attempt)
    if why:
        return abandoned_result(why)
    if job_id is not None:
        services.set_step(job_id, "profiling", attempt)
    try:
        with watched(task_id, job_id, attempt):
            return LocalEvaluator().profile(task_source, files, on_this_host(options)).to_dict()
    except Abandoned as stop:
        logger.warning("profile %s of job %s stopped: %s", task_id, job_id, stop)
        return abandoned_result(str(stop))


def worker_died_result() -> dict[str, Any]:
    """The result of an evaluation or profile whose worker died on every delivery (the candidate
    killed it, say): a failed evaluation like any candidate fault, so the agent loop goes on."""
    from sandbox.schema import EvalResult, Status, Verdict

    return EvalResult(status=Status.RUNTIME_ERROR, verdict=Verdict.FAIL, reasons=[worker_died_reason("evaluation")]).to_dict()


def worker_died_build() -> dict[str, Any]:
    from sandbox.schema import CompileResult

    return dataclasses.asdict(CompileResult(ok=False, mode="none", log=worker_died_reason("build")))
