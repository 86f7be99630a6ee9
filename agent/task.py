"""Building a TaskInfo from a KernelBench-format file: the name, the source and its hash."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from agent.policy import TaskInfo
from sandbox.cache import sha256_text
from sandbox.options import resolve_backend


def task_hash(source: str) -> str:
    """A task's identity everywhere (trajectories, jobs, evaluations, evaluation.json, the zip
    README): the sandbox's hash of the source (sandbox.cache.sha256_text, as EvalResult.task_hash)."""
    return sha256_text(source)


def is_task(recorded_hash: str, source: str) -> bool:
    """Whether a recorded hash names this source: today's hash, or the plain sha256 of the UTF-8
    source that trajectories recorded before both hashes became one."""
    legacy = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return recorded_hash in (task_hash(source), legacy)


def task_from_source(source: str, name: str, backend: str = "auto", options: dict[str, Any] | None = None) -> TaskInfo:
    """A task evaluated on this host (the CLI's LocalEvaluator): "auto" is resolved here."""
    if "class Model" not in source or "def get_inputs" not in source:
        raise ValueError(f"{name}: not a KernelBench-format task (needs class Model and get_inputs())")
    return TaskInfo(
        name=name,
        source=source,
        backend=resolve_backend(backend),
        options=dict(options or {}),
        task_hash=task_hash(source),
    )


def task_from_file(path: str | Path, backend: str = "auto", options: dict[str, Any] | None = None) -> TaskInfo:
    p = Path(path)
    return task_from_source(p.read_text(encoding="utf-8"), p.stem, backend, options)
