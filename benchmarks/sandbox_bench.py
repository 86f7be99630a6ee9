"""`python -m sandbox bench`: the issue's performance numbers, printed (never asserted).

- compile: fast-path build time (median of distinct candidates), cache-hit time, and that an
  identical load_inline candidate does not rebuild (with --inline; slow on CPU)
- throughput: complete evaluations (correctness + paired timing, compile cached) per minute on
  a task of about 1 ms
- repeatability: the same candidate evaluated several times: its medians, and its paired
  speedups with their intervals
- honest copy: a candidate that is literally the reference's forward, evaluated while the bench
  changes the machine's load between evaluations (busy-loop processes started before every
  second evaluation, stopped after it): each paired speedup must read about 1.0x with an
  interval that holds 1.0; the unpaired column divides the first evaluation's eager median by
  each later candidate median, as a cached baseline did (issue 17: 5.32x for an honest copy)
- baseline check (cuda): eager median against triton.testing.do_bench on the same module
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbox import compile_candidate, evaluate
from sandbox.options import BACKENDS, EvalOptions, resolve_backend
from sandbox.workloads import linear_relu_candidate, linear_relu_task, softmax_candidate, softmax_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox bench")
    parser.add_argument("--backend", choices=BACKENDS, default="auto")
    parser.add_argument("--evals", type=int, default=6)
    parser.add_argument("--inline", action="store_true", help="also time a load_inline build (slow)")
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--cols", type=int, default=0)
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="*",
        default=[2, 3],
        help="also run this many evaluations at once on the one device (timed loops hold it exclusively)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="one more evaluation per task with the children's phase timestamps on stderr",
    )
    parser.add_argument(
        "--honest-evals", type=int, default=6, help="evaluations of the honest copy (load changed between them)"
    )
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="busy-loop processes while the load is on (default: half the CPUs, at least 1)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of every child (default: 1 on the cpu backend, whose timed loops then share one CPU; "
        "the options' default on cuda)",
    )
    parser.add_argument(
        "--only",
        choices=["compile", "throughput", "honest"],
        nargs="*",
        default=None,
        help="run only these sections (default: all)",
    )
    parser.add_argument(
        "--compile-baseline",
        action="store_true",
        help="time torch.compile in the rounds too (compiles in every evaluation)",
    )
    args = parser.parse_args(argv or [])
    backend = resolve_backend(args.backend)
    cache = tempfile.mkdtemp(prefix="kw-bench-")
    threads = args.threads if args.threads is not None else (1 if backend == "cpu" else 0)
    opts = EvalOptions(
        backend=backend,
        cache_dir=cache,
        compile_baseline=args.compile_baseline,
        timing_budget_s=0.5,
        cpu_threads=threads,
    )
    print(
        f"# sandbox bench  backend={backend}  threads={opts.threads()}  rounds={opts.timing_rounds}  "
        f"noise limit {opts.noise_limit:.0%}  cache={cache}"
    )

    sections = set(args.only or ["compile", "throughput", "honest"])
    if "compile" in sections:
        _compile(opts, backend, args.inline)
    if "throughput" in sections:
        _throughputs(args, opts, backend)
    if "honest" in sections:
        n = 2048 if backend == "cuda" else 512
        _honest_copy(
            f"matmul {n}x{n} @ {n}x{n} fp32 (the issue's honest copy: return torch.matmul(A, B))",
            matmul_task(n),
            opts,
            args.honest_evals,
            args.busy or max(1, (os.cpu_count() or 2) // 2),
        )
    return 0


def _compile(opts: EvalOptions, backend: str, inline: bool) -> None:
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
    print(
        f"compile fast path ({res.mode}): median {statistics.median(times):.2f} s over 5 distinct candidates "
        f"(min {min(times):.2f}, max {max(times):.2f}); cache hit median {statistics.median(hit) * 1000:.1f} ms"
    )
    if inline:
        inline = {"model_new.py": _INLINE}
        a = compile_candidate(inline, opts)
        b = compile_candidate(inline, opts)
        print(
            f"load_inline: first build {a.seconds:.1f} s (ok={a.ok}), identical source again {b.seconds * 1000:.1f} ms (cached={b.cached})"
        )


def _throughputs(args: argparse.Namespace, opts: EvalOptions, backend: str) -> None:
    """Throughput and repeatability: the row softmax (small, memory-bound) and the ~1 ms linear layer."""
    rows, cols = (args.rows, args.cols) if args.rows else ((4096, 4096) if backend == "cuda" else (1024, 1024))
    shapes = (2048, 4096, 4096) if backend == "cuda" else (256, 512, 512)
    cases = [
        (
            f"row softmax {rows}x{cols} fp32 ({rows * cols * 4 / 1e6:.0f} MB per tensor)",
            softmax_task(rows, cols),
            softmax_candidate(0, backend),
        ),
        (
            f"linear + relu {shapes[0]}x{shapes[1]} @ {shapes[2]}x{shapes[1]} fp32 (library GEMM + fused epilogue kernel)",
            linear_relu_task(*shapes),
            linear_relu_candidate(backend),
        ),
    ]
    for label, task, files in cases:
        medians = _throughput(label, task, files, opts, args.evals, backend)
        for n in args.concurrency:
            if n > 1 and medians:
                _concurrent(task, files, opts, n, max(args.evals, 2 * n), medians)
        if args.trace:
            _traced(task, files, opts)


def matmul_task(n: int) -> str:
    return f"""import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


N = {n}


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
"""


def _busy(n: int) -> list[subprocess.Popen]:
    """n processes that spin on a CPU each until stopped (_stop)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def _interval(sp) -> str:
    return f"{sp.ratio:.3f}x  {sp.ci_low:.3f}-{sp.ci_high:.3f}" if sp else "-"


def _honest_copy(label: str, task: str, opts: EvalOptions, evals: int, busy: int) -> None:
    """The reference's own forward as the candidate, the load changed between evaluations."""
    print(
        f"\nhonest copy (ModelNew = Model, torch-ops allow): {label}; {busy} busy-loop process(es) "
        f"during every second evaluation"
    )
    files = {"model_new.py": task.replace("class Model(", "class ModelNew(")}
    opts = dataclasses.replace(opts, torch_ops="allow")
    rows, first_eager = [], None
    head = (
        f"{'eval':>4}  {'load':<5} {'eager ms':>9} {'cand ms':>9}  {'paired speedup, 95% interval':<29}"
        f"{'noise':>6}  {'verdict':<32} {'reward':>6}  {'unpaired':>9}"
    )
    print(head)
    for i in range(evals):
        load = "busy" if i % 2 else "idle"
        procs = _busy(busy) if load == "busy" else []
        try:
            res = evaluate(task, files, opts)
        finally:
            _stop(procs)
        if res.status.value != "ok" or res.speed is None:
            print(f"{i + 1:>4}  {load:<5} {res.status.value}: {res.reasons[:1]}")
            continue
        e, c, sp = res.timing.eager.median_ms, res.timing.candidate.median_ms, res.speed.vs_eager
        first_eager = first_eager or e
        rows.append((load, sp, res))
        print(
            f"{i + 1:>4}  {load:<5} {e:>9.4f} {c:>9.4f}  {_interval(sp):<29}{res.speed.noise:>6.0%}  "
            f"{sp.verdict + (' (noisy)' if res.speed.noisy else ''):<32} {res.reward:>6}  {first_eager / c:>8.2f}x"
        )
    if not rows:
        return
    held = sum(sp.ci_low <= 1.0 <= sp.ci_high for _, sp, _ in rows)
    ratios = [sp.ratio for _, sp, _ in rows]
    unpaired = [first_eager / r.timing.candidate.median_ms for _, _, r in rows]
    print(
        f"honest copy: {held} of {len(rows)} intervals hold 1.0, median paired speedup {statistics.median(ratios):.3f}x "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}), rewards {sorted({r.reward for _, _, r in rows})}; unpaired "
        f"(the first eager median over each candidate median, as a cached baseline read): "
        f"{min(unpaired):.2f}x to {max(unpaired):.2f}x"
    )


def _throughput(
    label: str, task: str, files: dict[str, str], opts: EvalOptions, evals: int, backend: str
) -> list[float]:
    print(f"\ntask: {label}")
    t0 = time.perf_counter()
    first = evaluate(task, files, opts)
    first_s = time.perf_counter() - t0
    print(f"first evaluation (starts the zygote, compiles): {first_s:.2f} s, status {first.status.value}")
    if first.status.value != "ok":
        print("  reasons:", first.reasons[:2])
        return []
    durations, medians, phases, speeds = [], [], {}, []
    for _ in range(evals):
        t0 = time.perf_counter()
        res = evaluate(task, files, opts)
        durations.append(time.perf_counter() - t0)
        medians.append(res.timing.candidate.median_ms if res.timing.candidate else float("nan"))
        if res.speed is not None:
            speeds.append(res.speed)
        for k, v in res.phases_s.items():
            phases.setdefault(k, []).append(v)
    per = statistics.median(durations)
    print(
        "where an evaluation's time goes (median s per step): "
        + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in phases.items() if k != "done")
    )
    print(
        f"evaluations (correctness {len(res.trials)} trials + paired timing, {opts.timing_rounds} rounds, compile cached): "
        f"median {per:.2f} s each -> {60 / per:.1f} per minute (target >= 25 per GPU-minute on ~1 ms tasks)"
    )
    print(
        f"candidate median {statistics.median(medians):.4f} ms; eager {res.timing.eager.median_ms:.4f} ms; status {res.status.value}"
    )
    for i, sp in enumerate(speeds):
        print(f"  evaluation {i + 1}: {sp.verdict}" + (f" -- {sp.milestone}" if sp.noisy else ""))
    c = res.timing.candidate
    if c is not None and c.event_median_ms is not None:
        print(
            f"  candidate's last evaluation: events {c.event_median_ms:.4f} ms + device tail {c.tail_median_ms:.4f} ms "
            f"(idle synchronise {c.sync_floor_ms:.4f} ms subtracted); host time of the call {c.host_median_ms or 0:.4f} ms; "
            f"back to back {c.loop_ms or 0:.4f} ms per call; {c.host_limited_calls or 0} calls outlasted the head start"
        )
    if len(medians) >= 2:
        print(
            f"repeatability: consecutive evaluations' medians differ by {abs(medians[-1] / medians[-2] - 1) * 100:.2f}% "
            f"(max pairwise over {len(medians)}: {(max(medians) / min(medians) - 1) * 100:.2f}%; target 2% at 0.5 ms or more)"
        )
    if len(speeds) >= 2:
        ratios = [sp.vs_eager.ratio for sp in speeds]
        print(
            f"repeatability of the paired speedup vs eager over {len(ratios)} evaluations: {min(ratios):.3f}x to {max(ratios):.3f}x "
            f"(max pairwise {(max(ratios) / min(ratios) - 1) * 100:.2f}%)"
        )
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
    print(
        f"{n} at once: {total} evaluations in {wall:.1f} s -> {60 * total / wall:.1f} per minute ({len(ok)} ok); "
        f"candidate median {statistics.median(medians) if medians else float('nan'):.4f} ms, {shift:+.2f}% against alone "
        f"(worst single evaluation {worst:.2f}% off)"
    )


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
    print(
        f"traced evaluation: {time.perf_counter() - t0:.2f} s, "
        + ", ".join(f"{k} {v:.2f}" for k, v in res.phases_s.items()),
        file=sys.stderr,
        flush=True,
    )


def _do_bench_check(task: str) -> None:
    """Eager baseline through our timer vs triton.testing.do_bench, in one process."""
    import importlib.util

    import torch
    from triton.testing import do_bench

    from sandbox.timing import Timer

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
    print(
        f"eager: our timer median {ours['median_ms']:.4f} ms vs triton do_bench median {theirs:.4f} ms "
        f"({(ours['median_ms'] / theirs - 1) * 100:+.1f}%)"
    )


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
