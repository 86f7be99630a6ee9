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
from .schema import CompileError, CompileResult, EvalResult, Status, Verdict

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
    """Build once per content hash (fast path g++/nvcc, or load_inline prebuilt in a child),
    after the same static scan an evaluation runs first: a load_inline build imports the
    candidate, so a source the evaluation would reject is not run to build it either."""
    from .build import build
    from .protocol import static_rejection, static_scan

    options = options or EvalOptions()
    options.validate()
    _, blocking = static_scan(files, options.torch_ops)
    if blocking:
        errors = [_scan_error(f) for f in blocking[:20]]
        return CompileResult(ok=False, mode="none", errors=errors, log=static_rejection(blocking))
    return build(files, options)[0]


def _scan_error(finding: str) -> CompileError:
    """A blocking finding ("file:line: why: text") as a compile error at its place."""
    name, _, rest = finding.partition(":")
    line, _, why = rest.partition(":")
    if not line.isdigit():
        return CompileError(file=name, line=None, column=None, message=f"static scan: {rest.strip()}")
    return CompileError(file=name, line=int(line), column=None, message=f"static scan: {why.strip()}")


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
