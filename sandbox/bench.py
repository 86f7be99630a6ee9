"""`python -m sandbox bench`: the issue's performance numbers, printed (never asserted).

- compile: fast-path build time (median of distinct candidates), cache-hit time, and that an
  identical load_inline candidate does not rebuild (with --inline; slow on CPU)
- throughput: complete evaluations (correctness + timing, compile cached) per minute on a task
  of about 1 ms
- repeatability: the same candidate evaluated twice, ratio of medians
- baseline check (cuda): eager median against triton.testing.do_bench on the same module
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from . import compile_candidate, evaluate
from .options import EvalOptions, cuda_present
from .workloads import linear_relu_candidate, linear_relu_task, softmax_candidate, softmax_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox bench")
    parser.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--evals", type=int, default=6)
    parser.add_argument("--inline", action="store_true", help="also time a load_inline build (slow)")
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--cols", type=int, default=0)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[2, 3],
                        help="also run this many evaluations at once on the one device (timed loops hold it exclusively)")
    parser.add_argument("--trace", action="store_true", help="one more evaluation per task with the children's phase timestamps on stderr")
    args = parser.parse_args(argv or [])
    backend = args.backend if args.backend != "auto" else ("cuda" if cuda_present() else "cpu")
    cache = tempfile.mkdtemp(prefix="kw-bench-")
    opts = EvalOptions(backend=backend, cache_dir=cache, compile_baseline=False, timing_budget_s=0.5)
    print(f"# sandbox bench  backend={backend}  cache={cache}")

    # compile
    times = []
    for v in range(5):
        res = compile_candidate(softmax_candidate(v, backend), opts)
        assert res.ok, res.log
        times.append(res.seconds)
    hit = []
    for _ in range(5):
        t0 = time.perf_counter()
        res = compile_candidate(softmax_candidate(0, backend), opts)
        hit.append(time.perf_counter() - t0)
        assert res.cached
    print(f"compile fast path ({res.mode}): median {statistics.median(times):.2f} s over 5 distinct candidates "
          f"(min {min(times):.2f}, max {max(times):.2f}); cache hit median {statistics.median(hit) * 1000:.1f} ms")
    if args.inline:
        inline = {"model_new.py": _INLINE}
        a = compile_candidate(inline, opts)
        b = compile_candidate(inline, opts)
        print(f"load_inline: first build {a.seconds:.1f} s (ok={a.ok}), identical source again {b.seconds * 1000:.1f} ms (cached={b.cached})")

    # throughput and repeatability: the row softmax (small, memory-bound) and the ~1 ms linear layer
    rows, cols = (args.rows, args.cols) if args.rows else ((4096, 4096) if backend == "cuda" else (1024, 1024))
    shapes = (2048, 4096, 4096) if backend == "cuda" else (256, 512, 512)
    cases = [(f"row softmax {rows}x{cols} fp32 ({rows * cols * 4 / 1e6:.0f} MB per tensor)", softmax_task(rows, cols), softmax_candidate(0, backend)),
             (f"linear + relu {shapes[0]}x{shapes[1]} @ {shapes[2]}x{shapes[1]} fp32 (library GEMM + fused epilogue kernel)",
              linear_relu_task(*shapes), linear_relu_candidate(backend))]
    for label, task, files in cases:
        medians = _throughput(label, task, files, opts, args.evals, backend)
        for n in args.concurrency:
            if n > 1 and medians:
                _concurrent(task, files, opts, n, max(args.evals, 2 * n), medians)
        if args.trace:
            _traced(task, files, opts)
    return 0


def _throughput(label: str, task: str, files: dict[str, str], opts: EvalOptions, evals: int, backend: str) -> list[float]:
    print(f"\ntask: {label}")
    t0 = time.perf_counter()
    first = evaluate(task, files, opts)
    first_s = time.perf_counter() - t0
    # the task's first `baseline_samples` evaluations each time one sample of the baseline: done
    # here, so that every measured evaluation below finds the baseline cached
    for _ in range(opts.baseline_samples - 1):
        if first.status.value == "ok":
            first = evaluate(task, files, opts)
    print(f"first evaluation (starts the zygote, measures the baseline): {first_s:.2f} s, status {first.status.value}, "
          f"eager median {first.timing.eager.median_ms if first.timing.eager else float('nan'):.4f} ms "
          f"(median of {opts.baseline_samples} samples: "
          f"{', '.join(f'{x:.4f}' for x in (first.timing.eager.samples_ms or [])) if first.timing.eager else '-'})")
    if first.status.value != "ok":
        print("  reasons:", first.reasons[:2])
        return []
    durations, medians, phases = [], [], {}
    for _ in range(evals):
        t0 = time.perf_counter()
        res = evaluate(task, files, opts)
        durations.append(time.perf_counter() - t0)
        medians.append(res.timing.candidate.median_ms if res.timing.candidate else float("nan"))
        for k, v in res.phases_s.items():
            phases.setdefault(k, []).append(v)
    per = statistics.median(durations)
    print("where an evaluation's time goes (median s per step): " + ", ".join(
        f"{k} {statistics.median(v):.2f}" for k, v in phases.items() if k != "done"))
    print(f"evaluations (correctness {len(res.trials)} trials + timing, compile and baselines cached): median {per:.2f} s each "
          f"-> {60 / per:.1f} per minute (target >= 20 per GPU-minute on ~1 ms tasks)")
    print(f"candidate median {statistics.median(medians):.4f} ms; eager {res.timing.eager.median_ms:.4f} ms; status {res.status.value}")
    c = res.timing.candidate
    if c is not None and c.event_median_ms is not None:
        print(f"  candidate's last evaluation: events {c.event_median_ms:.4f} ms + device tail {c.tail_median_ms:.4f} ms "
              f"(idle synchronise {c.sync_floor_ms:.4f} ms subtracted); host time of the call {c.host_median_ms or 0:.4f} ms; "
              f"back to back {c.loop_ms or 0:.4f} ms per call; {c.host_limited_calls or 0} calls outlasted the head start")
    if len(medians) >= 2:
        print(f"repeatability: consecutive evaluations' medians differ by {abs(medians[-1] / medians[-2] - 1) * 100:.2f}% "
              f"(max pairwise over {len(medians)}: {(max(medians) / min(medians) - 1) * 100:.2f}%)")
    if backend == "cuda":
        try:
            _do_bench_check(task)
        except Exception as exc:
            print(f"do_bench comparison unavailable: {type(exc).__name__}: {exc}")
    return medians


def _concurrent(task: str, files: dict[str, str], opts: EvalOptions, n: int, total: int, alone: list[float]) -> None:
    """`total` evaluations, `n` at a time, on the one device: evaluations per minute, and whether
    the candidate's median moved against the evaluations run alone (it must not: each timed
    loop holds the device lock exclusively, everything else of an evaluation holds it shared)."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda _: evaluate(task, files, opts), range(total)))
    wall = time.perf_counter() - t0
    ok = [r for r in results if r.status.value == "ok"]
    medians = [r.timing.candidate.median_ms for r in ok]
    base = statistics.median(alone)
    shift = (statistics.median(medians) / base - 1) * 100 if medians else float("nan")
    worst = max((abs(m / base - 1) * 100 for m in medians), default=float("nan"))
    print(f"{n} at once: {total} evaluations in {wall:.1f} s -> {60 * total / wall:.1f} per minute ({len(ok)} ok); "
          f"candidate median {statistics.median(medians) if medians else float('nan'):.4f} ms, {shift:+.2f}% against alone "
          f"(worst single evaluation {worst:.2f}% off)")


def _traced(task: str, files: dict[str, str], opts: EvalOptions) -> None:
    """KW_TRACE makes each child log its phase timestamps; isolation.Child.close prints them."""
    import os
    import sys

    os.environ["KW_TRACE"] = "1"
    try:
        t0 = time.perf_counter()
        res = evaluate(task, files, opts)
    finally:
        del os.environ["KW_TRACE"]
    print(f"traced evaluation: {time.perf_counter() - t0:.2f} s, " + ", ".join(f"{k} {v:.2f}" for k, v in res.phases_s.items()),
          file=sys.stderr, flush=True)


def _do_bench_check(task: str) -> None:
    """Eager baseline through our timer vs triton.testing.do_bench, in one process."""
    import importlib.util

    import torch
    from triton.testing import do_bench

    from .timing import Timer

    path = Path(tempfile.mkdtemp()) / "task.py"
    path.write_text(task)
    spec = importlib.util.spec_from_file_location("bench_task", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    sets = [[x.cuda() for x in mod.get_inputs()] for _ in range(3)]
    with torch.no_grad():
        ours, _ = Timer("cuda").run(lambda x: model(x), sets, 1.0, 20, 1000, 3)
        theirs = do_bench(lambda: model(sets[0][0]), warmup=25, rep=500, return_mode="median")
    print(f"eager: our timer median {ours['median_ms']:.4f} ms vs triton do_bench median {theirs:.4f} ms "
          f"({(ours['median_ms'] / theirs - 1) * 100:+.1f}%)")


_INLINE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
"""
ext = load_inline(name="kw_bench_twice", cpp_sources=src, functions=["twice"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.twice(x)
'''
