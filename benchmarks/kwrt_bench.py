"""`python -m benchmarks.kwrt_bench`: the host cost of one kwrt call, step by step.

Why: a generated candidate calls each of its kernels through kwrt (sandbox/runtime/kwrt.py), and a
host-bound forward (many small kernels) pays kwrt's Python once per kernel in every timed call. This
builds a real kernel library the way the sandbox builds a candidate (`sandbox.build.build`, the fast
path's g++/nvcc command inside the sandbox), then prints, in one run, the median nanoseconds per call
of: a bare ctypes call of the same exported no-op function with precomputed tensor pointers, the
current kwrt's call, a baseline kwrt (`--baseline REV`: kwrt.py as it was in that git revision,
loaded side by side as its own module), and the steps of a kwrt call on their own (argument checks,
pointer extraction, counting, the stream lookup). Rounds of both kwrts are interleaved, so drift of
a shared machine hits both alike. The per-call host cost is the same code path on cpu and cuda,
except the stream lookup, which only the cuda backend makes (`--backend cuda`). Numbers are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "sandbox" / "runtime"
BASELINE = "f7bba56"  # the last commit before kwrt's per-call rewrite (issue 18, tenth session)

# the shape of a generated bias + ReLU call: three tensors, two sizes, the stream
KERNEL = r"""
#include <cstdint>
extern "C" int kw_noop(const float* x, const float* bias, float* out, int64_t rows, int64_t cols, void* stream) {
    return (x == nullptr || out == nullptr || rows < 0 || cols < 0) ? 1 : 0;
}
"""
MODEL = "import kwrt\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def build_library(backend: str, cache_dir: str) -> str:
    """The kernel library as the sandbox's compile step builds a candidate's kernels/."""
    from sandbox.build import build
    from sandbox.options import EvalOptions

    ext = "cu" if backend == "cuda" else "cpp"
    result, artifacts = build(
        {"model_new.py": MODEL, f"kernels/noop.{ext}": KERNEL}, EvalOptions(backend=backend, cache_dir=cache_dir)
    )
    if not result.ok or not artifacts.library:
        raise SystemExit(f"building the kernel library failed:\n{result.log}")
    return artifacts.library


def load_kwrt(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def baseline_file(rev: str, into: Path) -> Path:
    """kwrt.py of git revision `rev`, or the file `rev` names (a checkout without git history)."""
    if Path(rev).is_file():
        return Path(rev)
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:sandbox/runtime/kwrt.py"], capture_output=True, text=True, check=True
    ).stdout
    path = into / "kwrt_baseline.py"
    path.write_text(text)
    return path


def cases(kw: ModuleType, base: ModuleType | None, device: str) -> dict[str, tuple[str, dict]]:
    """name -> (one call's statement, its namespace); every statement does what its name says."""
    import ctypes

    import torch

    x, bias, out = (torch.ones(n, device=device) for n in (64, 8, 64))
    raw = ctypes.CDLL(os.environ["KWRT_LIB"]).kw_noop
    raw.restype, raw.argtypes = ctypes.c_int, [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_void_p]
    px, pb, po, stream = x.data_ptr(), bias.data_ptr(), out.data_ptr(), kw.stream()
    ns = {
        "raw": raw,
        "px": px,
        "pb": pb,
        "po": po,
        "x": x,
        "bias": bias,
        "out": out,
        "s": stream,
        "T": torch.Tensor,
        "cuda": device == "cuda",
        "counts": {},
        "lib": kw.load(),
        "kw": kw,
    }
    rows: dict[str, tuple[str, dict]] = {
        "bare ctypes (argtypes, precomputed pointers)": ("raw(px, pb, po, 8, 8, s)", ns),
        "kwrt call (this tree)": ("lib.kw_noop(x, bias, out, 8, 8, s)", ns),
    }
    if base is not None:
        rows["kwrt call (baseline)"] = ("blib.kw_noop(x, bias, out, 8, 8, s)", {**ns, "blib": base.load()})
    on = "is_cuda" if device == "cuda" else "is_cpu"
    tensor_check = " and ".join(
        f"isinstance({t}, T) and {t}.is_contiguous() and {t}.{on}" for t in ("x", "bias", "out")
    )
    rows.update(
        {
            f"step: checks, 3 tensors (isinstance, is_contiguous, {on})": (tensor_check, ns),
            "step: checks, 3 others (type in the plain types)": (
                "type(8) in plain and type(8) in plain and type(s) in plain",
                {**ns, "plain": kw._PLAIN},
            ),
            "step: pointers, 3 tensors (data_ptr)": ("x.data_ptr(); bias.data_ptr(); out.data_ptr()", ns),
            "step: counting (dict get + set)": ("counts['kw_noop'] = counts.get('kw_noop', 0) + 1", ns),
            f"step: stream lookup (kwrt.stream(), {'per forward' if device == 'cuda' else 'cpu: the null pointer'})": (
                "kw.stream(x.device if cuda else None)",
                ns,
            ),
        }
    )
    return rows


def median_ns(stmt: str, ns: dict, calls: int, clock: Callable[[], float]) -> float:
    timer = timeit.Timer(stmt, timer=clock, globals=ns)
    timer.timeit(max(calls // 10, 10))  # warm: binds argtypes, fills caches
    return timer.timeit(calls) / calls * 1e9


def run(rows: dict[str, tuple[str, dict]], calls: int, rounds: int, clock: Callable[[], float]) -> dict[str, float]:
    """Median over `rounds` of the mean ns per call of `calls` back-to-back calls; rows interleave."""
    per: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, (stmt, ns) in rows.items():
            per[name].append(median_ns(stmt, ns, calls, clock))
    return {name: statistics.median(v) for name, v in per.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--baseline",
        default=BASELINE,
        help="git revision of the kwrt.py to compare with, or a kwrt.py file ('' for none)",
    )
    parser.add_argument("--calls", type=int, default=20000, help="back-to-back calls per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--clock",
        choices=("thread", "wall"),
        default="thread",
        help="thread: this thread's CPU time (a shared machine's preemptions left out); wall: perf_counter",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kwrt-bench-") as tmp:
        os.environ["KW_BACKEND"] = args.backend  # read by kwrt at import
        os.environ["KWRT_LIB"] = build_library(args.backend, str(Path(tmp) / "cache"))
        kw = load_kwrt("kwrt", RUNTIME / "kwrt.py")
        base = load_kwrt("kwrt_baseline", baseline_file(args.baseline, Path(tmp))) if args.baseline else None
        rows = cases(kw, base, "cuda" if args.backend == "cuda" else "cpu")
        medians = run(rows, args.calls, args.rounds, time.thread_time if args.clock == "thread" else time.perf_counter)
        counted = kw.calls().get("kw_noop", 0)
    print(
        f"kwrt per-call host cost, backend {args.backend}, {args.clock} clock, median of {args.rounds} rounds x {args.calls} calls "
        f"(python {sys.version.split()[0]}; baseline {args.baseline or 'none'})"
    )
    width = max(map(len, medians))
    for name, ns_ in medians.items():
        print(f"  {name:<{width}}  {ns_:8.0f} ns")
    steps = sum(v for k, v in medians.items() if k.startswith("step:") and "stream" not in k)
    rest = medians["kwrt call (this tree)"] - medians["bare ctypes (argtypes, precomputed pointers)"] - steps
    label = "the rest of this tree's call (the Python around it)"
    print(f"  {label:<{width}}  {rest:8.0f} ns")
    expected = args.rounds * (args.calls + max(args.calls // 10, 10))
    print(f"  calls counted by this tree's kwrt: {counted} (made: {expected})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
