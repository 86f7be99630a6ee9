"""What the gpu worker does around a sandbox call: report progress to the job's viewers and
remember the baselines it measured.

Progress from the sandbox ("correctness", {"trial": 3, "of": 5}) becomes the job's current
step ("checking correctness 3/5") through services.set_step, which writes and announces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from webapp.queues import worker_died_reason

STEP_WORDS = {
    "compile": "compiling",
    "compiling": "compiling",
    "starting": "starting the sandbox",
    "reference": "running the reference",
    "roofline": "measuring the roofline",
    "done": "evaluated",
    "baseline": "timing baselines",
    "baselines": "timing baselines",
    "import": "importing the candidate",
    "correctness": "checking correctness",
    "judging": "comparing outputs",
    "timing": "timing",
    "audit": "auditing",
    "profile": "profiling",
    "profiling": "profiling",
}


def step_text(step: str, detail: dict[str, Any] | None) -> str:
    words = STEP_WORDS.get(step, step.replace("_", " "))
    detail = detail or {}
    index = detail.get("trial", detail.get("index", detail.get("i")))
    total = detail.get("of", detail.get("total", detail.get("n")))
    if isinstance(index, int) and isinstance(total, int):
        return f"{words} {index}/{total}"
    return words


def _progress(job_id: int | None):
    if job_id is None:
        return None
    from webapp.jobs.services import set_step

    def on_progress(step: str, detail: dict[str, Any] | None = None) -> None:
        set_step(job_id, step_text(step, detail))

    return on_progress


def evaluate_for_job(task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None) -> dict[str, Any]:
    from agent.evaluator import LocalEvaluator

    result = LocalEvaluator().evaluate(task_source, files, options, on_progress=_progress(job_id))
    data = result.to_dict()
    remember_baselines(data, options)
    return data


def profile_for_job(task_source: str, files: dict[str, str], options: dict[str, Any], job_id: int | None) -> dict[str, Any]:
    from agent.evaluator import LocalEvaluator

    if job_id is not None:
        from webapp.jobs.services import set_step

        set_step(job_id, "profiling")
    return LocalEvaluator().profile(task_source, files, options).to_dict()


def worker_died_result() -> dict[str, Any]:
    """The result of an evaluation or profile whose worker died on every delivery (the candidate
    killed it, say): a failed evaluation like any candidate fault, so the agent loop goes on."""
    from sandbox.schema import EvalResult, Status, Verdict

    return EvalResult(status=Status.RUNTIME_ERROR, verdict=Verdict.FAIL, reasons=[worker_died_reason("evaluation")]).to_dict()


def worker_died_build() -> dict[str, Any]:
    from sandbox.schema import CompileResult

    return dataclasses.asdict(CompileResult(ok=False, mode="none", log=worker_died_reason("build")))


def options_key(options: dict[str, Any]) -> str:
    timing_relevant = {k: options.get(k) for k in sorted(options) if k not in ("cache_dir",)}
    return hashlib.sha256(json.dumps(timing_relevant, sort_keys=True, default=str).encode()).hexdigest()


def remember_baselines(result: dict[str, Any], options: dict[str, Any]) -> None:
    """Keep the eager/compile timings of a task per device and torch version (the sandbox reuses
    its own cache for measuring; this table is what pages and the API show and compare)."""
    from webapp.jobs.models import BaselineCache

    timing = result.get("timing") or {}
    if not (result.get("task_hash") and result.get("device") and timing.get("eager")):
        return
    BaselineCache.objects.update_or_create(
        task_hash=result["task_hash"],
        device=result["device"][:200],
        torch_version=result.get("torch_version", "")[:64],
        options_key=options_key(options),
        defaults={"timing": {k: timing.get(k) for k in ("eager", "compile", "clock", "l2_flush", "input_sets")}},
    )
