"""Run the built-in policy on one task through the real loop and sandbox, and summarise it.

Shared by the suite benchmark and the case-study script so that both measure the same way.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.builtin import BuiltinPolicy
from agent.evaluator import LocalEvaluator
from agent.events import EvaluationEvent
from agent.loop import Budgets, RunResult, median_ms, run
from agent.policy import Policy
from agent.task import task_from_source

TASKS_DIR = Path(__file__).resolve().parent / "tasks"


@dataclass
class TaskOutcome:
    name: str
    correct: bool
    reward: int | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    candidate_ms: float | None
    eager_ms: float | None
    compile_ms: float | None
    fraction_of_sol: float | None
    turns: int
    seconds: float
    reason: str
    summary: str = ""
    evaluations: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def task_paths(selection: list[str] | None = None) -> list[Path]:
    paths = sorted(TASKS_DIR.glob("*.py"))
    if not selection:
        return paths
    out = []
    for s in selection:
        p = Path(s)
        if p.suffix == ".py" and p.exists():
            out.append(p)
            continue
        hits = [q for q in paths if q.stem == s or re.fullmatch(s.replace("*", ".*"), q.stem)]
        if not hits:
            raise SystemExit(f"no task named {s!r} under {TASKS_DIR}")
        out += hits
    return out


def shrink_source(source: str, factor: int) -> str:
    """Divide the module-level size constants (ints >= 64) by `factor` (at least 8): the same
    task at a size a CPU run finishes quickly."""
    if factor <= 1:
        return source

    def rep(m: re.Match) -> str:
        v = int(m.group(2))
        return f"{m.group(1)} = {max(8, v // factor) if v >= 64 else v}"

    return re.sub(r"^(\w+) = (\d+)$", rep, source, flags=re.M)


def environment(backend: str) -> dict[str, Any]:
    import torch

    dev = "cpu: " + (platform.processor() or platform.machine())
    if backend == "cuda" and torch.cuda.is_available():
        dev = torch.cuda.get_device_name()
    return {
        "device": dev,
        "backend": backend,
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
    }


def run_task(
    path: Path,
    backend: str,
    options: dict[str, Any] | None = None,
    policy: Policy | None = None,
    max_turns: int = 30,
    shrink: int = 1,
    source: str | None = None,
    name: str | None = None,
) -> tuple[TaskOutcome, RunResult]:
    """One task through the loop and the sandbox; `source` (default: the file, shrunk by `shrink`)
    and `name` (default: the file's stem) for tasks whose text is prepared elsewhere (KernelBench's)."""
    if source is None:
        source = shrink_source(path.read_text(), shrink)
    task = task_from_source(source, path.stem, backend, dict(options or {}))
    policy = policy or BuiltinPolicy()
    t0 = time.time()
    res = run(task, policy, LocalEvaluator(), Budgets(max_turns=max_turns))
    secs = time.time() - t0
    evals = res.trajectory.of_type(EvaluationEvent)
    best_eval = None
    if res.best is not None:
        best_eval = next((e.result for e in reversed(evals) if e.version == res.best.version), None)
    timing = (best_eval or {}).get("timing") or {}
    fin = res.trajectory.finished()

    def med(k: str) -> float | None:
        return median_ms(best_eval, k)

    out = TaskOutcome(
        name=name or path.stem,
        correct=res.verified,
        reward=res.best.reward if res.best else None,
        speedup_vs_eager=res.best.speedup_vs_eager if res.best else None,
        speedup_vs_compile=res.best.speedup_vs_compile if res.best else None,
        candidate_ms=med("candidate"),
        eager_ms=med("eager") or _any_baseline(evals, "eager"),
        compile_ms=med("compile") or _any_baseline(evals, "compile"),
        fraction_of_sol=((best_eval or {}).get("roofline") or {}).get("fraction_of_sol"),
        turns=res.turns,
        seconds=secs,
        reason=res.reason,
        summary=fin.summary if fin else "",
        evaluations=len(evals),
        # every sample behind the best evaluation's baselines (sandbox: one per reference process)
        extra={f"{k}_samples_ms": (timing.get(k) or {}).get("samples_ms") for k in ("eager", "compile")},
    )
    return out, res


def run_parallel(fn: Callable[..., Any], arg_lists: list[tuple], jobs: int) -> Iterator[Any]:
    """fn(*args) for each argument tuple, as each finishes. jobs > 1 runs tasks in separate processes (spawned:
    each has its own sandbox zygote); their timed loops still never overlap on one device,
    because the sandbox holds the device lock exclusively while timing (sandbox.devlock), so
    only compiles, torch.compile builds and correctness trials run side by side."""
    if jobs <= 1:
        for args in arg_lists:
            yield fn(*args)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_share_cores, initargs=(threads,)
    ) as pool:
        futures = [pool.submit(fn, *args) for args in arg_lists]
        for fut in as_completed(futures):
            yield fut.result()


def _share_cores(threads: int) -> None:
    """Each side-by-side job's own torch work (the sandbox parent's output comparisons) gets its
    share of the cores, not all of them: a comparison on every core starved the other jobs'
    timing processes of CPU, which shows as launch latency in sub-0.2 ms timings."""
    import torch

    torch.set_num_threads(threads)


def _any_baseline(evals: list[EvaluationEvent], key: str) -> float | None:
    for e in evals:
        v = median_ms(e.result, key)
        if v:
            return v
    return None


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def median(values: list[float]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2])
