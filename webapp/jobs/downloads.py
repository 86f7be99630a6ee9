"""What a user takes home: the best candidate as a zip with a README saying exactly what was
measured, on which device, against which baselines, plus the evaluation JSON."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from agent.workspace import WorkspaceError, check_path
from webapp.jobs.models import Job

KWRT_PATH = Path(__file__).resolve().parents[2] / "sandbox" / "runtime" / "kwrt.py"


def _stats_line(label: str, s: dict[str, Any] | None) -> str:
    if not s:
        return f"- {label}: not measured"
    return (
        f"- {label}: median {s['median_ms']:.4g} ms (min {s['min_ms']:.4g}, max {s['max_ms']:.4g}, "
        f"spread {s['spread']:.2g}, {s['trials']} timed runs)"
    )


def result_lines(job: Job) -> list[str]:
    """The job's result as the pages show it (Job.result()): confirmed or not, each speedup with
    its paired interval, a noisy window and what its milestone was judged on."""
    result = job.result()
    if result is None:
        return ["- result: no verified candidate"]
    how = (
        "confirmed: the median of the best candidate's evaluations after the last turn"
        if result.confirmed
        else "not confirmed by re-evaluation (the best evaluation so far)"
    )
    lines = [
        f"- result ({how}): reward {result.reward} "
        "(-1 incorrect, 1 correct, 2 >5% faster than eager, 3 >5% faster than eager and torch.compile, "
        "'faster' judged on the interval's lower end)"
    ]
    lines += [f"- speedup: {part}" for part in result.speed.parts()]
    if result.speed.milestone:
        lines.append(f"- reward: {result.speed.milestone}")
    return lines


def readme(job: Job) -> str:
    ev = job.best_evaluation or {}
    timing = ev.get("timing") or {}
    trials = ev.get("trials") or []
    passed = sum(1 for t in trials if t.get("passed"))
    lines = [
        f"# {job.name}: best candidate (version {job.best_version})",
        "",
        "Produced by Kernelwright. `model_new.py` defines `ModelNew`, a drop-in replacement for the",
        "task's `Model` (same constructor arguments, same parameter names: load the reference's",
        "state_dict with strict=True).",
        "",
        "## How to use",
        "",
        "- Keep the folder layout. `kwrt.py` (the small ctypes runtime that builds and loads",
        "  `kernels/*.cu` or `kernels/*.cpp`) must be importable: run from this folder or add it to",
        "  `sys.path`.",
        "- `from model_new import ModelNew; m = ModelNew(*get_init_inputs())`.",
        "",
        "## What was measured",
        "",
        f"- device: {ev.get('device') or 'unknown'} (backend {ev.get('backend') or '?'}, torch {ev.get('torch_version') or '?'})",
        f"- status: {ev.get('status', 'unknown')}",
        *result_lines(job),
        f"- correctness: {passed}/{len(trials)} trials passed",
        f"- clock: {timing.get('clock') or '?'}, L2 flushed between calls: {timing.get('l2_flush')}, input sets rotated: {timing.get('input_sets')}",
        _stats_line("candidate", timing.get("candidate")),
        _stats_line("eager", timing.get("eager")),
        _stats_line("torch.compile", timing.get("compile")),
        f"- options: {json.dumps(ev.get('options') or job.options, sort_keys=True)}",
        f'- task hash: {job.task_hash} (of task.py: `python -c "from sandbox.cache import sha256_text; '
        f"print(sha256_text(open('task.py').read()))\"`), candidate hash: {ev.get('candidate_hash') or '?'}",
        "",
        f"`evaluation.json` holds the full result (schema {ev.get('schema') or 'unknown'}); `task.py` the reference.",
        "Numbers from another device or torch version will differ: re-run `python -m sandbox evaluate`.",
    ]
    return "\n".join(lines) + "\n"


def _inside_folder(path: str) -> bool:
    """A stored file name that stays inside the zip's folder (agent.workspace.check_path's rule,
    as a run writes them and the importer requires): never `..`, absolute or backslashed."""
    try:
        return check_path(path) == path
    except WorkspaceError:
        return False


def best_zip(job: Job) -> bytes:
    buf = io.BytesIO()
    folder = f"kernelwright-job{job.pk}"
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for art in job.artifacts.all():
            if _inside_folder(art.path):
                zf.writestr(f"{folder}/{art.path}", art.content)
        if KWRT_PATH.exists() and not job.artifacts.filter(path="kwrt.py").exists():
            zf.writestr(f"{folder}/kwrt.py", KWRT_PATH.read_text())
        zf.writestr(f"{folder}/README.md", readme(job))
        zf.writestr(f"{folder}/evaluation.json", json.dumps(job.best_evaluation or {}, indent=1))
        zf.writestr(f"{folder}/task.py", job.source)
    return buf.getvalue()
