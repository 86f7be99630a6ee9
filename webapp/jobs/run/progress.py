"""How an evaluation's progress travels from the gpu worker to the job's page, and its words.

The sandbox reports steps ("correctness", {"trial": 3, "of": 5}); the gpu worker stores the
latest in Redis under the task's progress key (`reporter`), the agent worker's sender reads it
while it polls for the result (`read`) and hands it to the loop's on_progress, and the runner
shows it as the job's step in words (`step_text`: "checking correctness 3/5").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from webapp.queues import progress_key

logger = logging.getLogger(__name__)
TTL_S = 3600  # a progress key outlives the longest gpu task's wait for its result

DEVICE_WAIT = "waiting for the device (another evaluation is being timed)"
STEP_WORDS = {
    "device_wait": DEVICE_WAIT,
    "memory_wait": "waiting for device memory (other evaluations hold it)",
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

Report = Callable[[str, dict[str, Any]], None]


def _counted(words: str, detail: dict[str, Any] | None) -> str:
    detail = detail or {}
    index = detail.get("trial", detail.get("index", detail.get("i")))
    total = detail.get("of", detail.get("total", detail.get("n")))
    if isinstance(index, int) and isinstance(total, int):
        return f"{words} {index}/{total}"
    return words


def step_text(step: str, detail: dict[str, Any] | None) -> str:
    """The job's step for a progress report of the sandbox."""
    words = STEP_WORDS.get(step, step.replace("_", " "))
    if step in ("baseline", "baselines") and (detail or {}).get("compile"):
        words += " (building torch.compile)"
    return _counted(words, detail)


def reporter(client: Any, task_id: str) -> Report:
    """A gpu worker's report of task `task_id`'s progress: the latest, as JSON under the task's
    progress key in Redis, which the sender reads while it polls for the result. Reports are
    numbered so that the same step twice (a device wait, then the step it interrupted) is seen
    twice. A report Redis does not take is dropped: progress must never hold an evaluation up."""
    count = [0]

    def report(step: str, detail: dict[str, Any]) -> None:
        count[0] += 1
        body = json.dumps({"n": count[0], "step": step, "detail": _plain(detail)})
        try:
            client.set(progress_key(task_id), body, ex=TTL_S)
        except Exception as exc:  # Redis restarting: the next report tries again
            logger.warning("progress of task %s not reported (%s)", task_id, type(exc).__name__)

    return report


def read(raw: bytes | str | None) -> tuple[int, str, dict[str, Any]] | None:
    """(number, step, detail) of a progress key's value, or None when there is none (or it is not
    a report: progress is a courtesy and never fails the evaluation it describes)."""
    try:
        data = json.loads(raw) if raw else None
        if not isinstance(data, dict):
            return None
        return int(data.get("n") or 0), str(data.get("step") or ""), dict(data.get("detail") or {})
    except (TypeError, ValueError):
        return None


def _plain(detail: dict[str, Any] | None) -> dict[str, Any]:
    """The detail as JSON can carry it (the sandbox's details are numbers and words)."""
    return {
        str(k): v if isinstance(v, str | int | float | bool) or v is None else str(v) for k, v in (detail or {}).items()
    }
