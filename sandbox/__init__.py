"""Kernelwright's trust core: compile, evaluate and profile candidate kernels against a
KernelBench-format task, in isolated child processes, with the result in one versioned schema.

    from sandbox import EvalOptions, evaluate, compile_candidate, profile_candidate, load_candidate
    opts = EvalOptions(backend="cpu")
    res = evaluate(task_source, load_candidate("path/to/workspace"), opts)
"""

from __future__ import annotations

import os
from pathlib import Path

# Big tensors in 2 MB pages (see isolation.scrubbed_env); effective if torch has not allocated yet.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from . import hostfs
from .options import EvalOptions
from .protocol import Progress
from .protocol import baseline as _baseline
from .protocol import evaluate as _evaluate
from .schema import CompileResult, EvalResult, Status, Verdict

__all__ = [
    "EvalOptions",
    "EvalResult",
    "CompileResult",
    "Status",
    "Verdict",
    "evaluate",
    "compile_candidate",
    "profile_candidate",
    "load_candidate",
    "baseline",
]

MAX_CANDIDATE_FILE_BYTES = 64 << 20
_TEXT_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".inc", ".txt", ".md", ".json")


def load_candidate(path: str | Path) -> dict[str, str]:
    """A candidate on disk -> {relative path: text}. A single .py file becomes model_new.py
    (KernelBench style); a folder contributes its source files (hidden files and caches skipped).
    A folder may come from an upload or an archive and the evaluator may be root: a link or
    special file in it raises (sandbox.hostfs.Unsafe, an OSError) instead of being followed."""
    p = Path(path)
    if p.is_file():
        return {"model_new.py": p.read_text()}
    if not p.is_dir():
        raise FileNotFoundError(f"no candidate file or folder at {p}")
    files = {}
    for rel, fd in hostfs.regular_files(p, _skipped):
        if rel.endswith(_TEXT_SUFFIXES):
            files[rel] = hostfs.read_bounded(fd, MAX_CANDIDATE_FILE_BYTES).decode()
    return files


def _skipped(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.startswith(".") or name == "__pycache__"


def compile_candidate(files: dict[str, str], options: EvalOptions | None = None) -> CompileResult:
    """Build once per content hash (fast path g++/nvcc, or load_inline prebuilt in a child)."""
    from .build import build

    options = options or EvalOptions()
    options.validate()
    return build(files, options)[0]


def evaluate(
    task_source: str, files: dict[str, str], options: EvalOptions | None = None, on_progress: Progress | None = None
) -> EvalResult:
    """Full evaluation; never raises for task or candidate faults (see EvalResult.status)."""
    return _evaluate(task_source, files, options, on_progress)


def profile_candidate(
    task_source: str, files: dict[str, str], options: EvalOptions | None = None, on_progress: Progress | None = None
) -> EvalResult:
    """An evaluation plus the per-kernel profiler table and the roofline."""
    return _evaluate(task_source, files, options, on_progress, profile=True)


def baseline(task_source: str, options: EvalOptions | None = None) -> EvalResult:
    """Eager and torch.compile timings of the task alone (cached per task, device, torch)."""
    return _baseline(task_source, options)
