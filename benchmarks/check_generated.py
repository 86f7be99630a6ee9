"""A quick smoke check of the generator, without the sandbox: for every suite task, generate
the final candidate, build the kernels directly (g++ or nvcc), run ModelNew next to the
reference on the task's inputs and print the max error and a rough eager-vs-candidate time.

    python -m benchmarks.check_generated [--backend cpu|cuda] [--shrink N] [--sanitize] [TASK ...]

`--sanitize` (cpu): the kernels built with AddressSanitizer, the process restarted with its
runtime preloaded; an out-of-bounds access stops the run with its kernel and line (inside the
sandbox the same write is a crash, or a silent corruption of the candidate's own memory).

This is a developer's check (the numbers that count come from the sandbox, via
benchmarks.suite); it runs the task code in this process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

from agent.builtin.graph import analyze_source
from agent.builtin.pipeline import build_candidate
from agent.builtin.rewrites import all_rewrites
from benchmarks.runner import shrink_source, task_paths

RUNTIME = Path(__file__).resolve().parent.parent / "sandbox" / "runtime"


def _module(name: str, src: str) -> types.ModuleType:
    m = types.ModuleType(name)
    exec(compile(src, name, "exec"), m.__dict__)
    return m


ASAN_FLAGS = ["-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"]


def _with_asan_runtime() -> None:
    """Restart this process with libasan preloaded (a sanitized library loaded into an
    unsanitized Python needs its runtime first), unless it is already."""
    runtime = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if runtime in os.environ.get("LD_PRELOAD", ""):
        return
    env = os.environ | {"LD_PRELOAD": runtime, "ASAN_OPTIONS": "detect_leaks=0"}
    os.execve(sys.executable, [sys.executable, "-m", "benchmarks.check_generated", *sys.argv[1:]], env)


def _build(files: dict[str, str], backend: str, d: str, sanitize: bool = False) -> str:
    """The candidate's kernels/ files written under d; its main file (which includes any parts) built."""
    for name, text in files.items():
        if name.startswith("kernels/"):
            Path(d, name).parent.mkdir(parents=True, exist_ok=True)
            Path(d, name).write_text(text)
    src = os.path.join(d, "kernels", "fused.cu" if backend == "cuda" else "fused.cpp")
    so = os.path.join(d, "k.so")
    if backend == "cuda":
        cmd = ["nvcc", "-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", src, "-o", so, "-lcublas"]
    else:
        opt = ASAN_FLAGS if sanitize else ["-O3", "-march=native"]
        cmd = ["g++", *opt, "-fopenmp", "-shared", "-fPIC", src, "-o", so]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return so


def _time(fn, args, cuda: bool, n: int = 20) -> float:
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn(*args)
        if cuda:
            torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--shrink", type=int, default=0)
    ap.add_argument("--sanitize", action="store_true", help="cpu: build with AddressSanitizer")
    ap.add_argument("tasks", nargs="*")
    args = ap.parse_args(argv)
    if args.sanitize:
        if args.backend != "cpu":
            ap.error("--sanitize builds the CPU kernels")
        _with_asan_runtime()
    shrink = args.shrink or (16 if args.backend == "cpu" else 1)
    sys.path.insert(0, str(RUNTIME))
    os.environ["KW_BACKEND"] = args.backend
    import kwrt

    dev = "cuda" if args.backend == "cuda" else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False  # the sandbox's precision flags
    torch.backends.cudnn.allow_tf32 = False
    failures = 0
    for path in task_paths(args.tasks):
        name = path.stem
        try:
            src = shrink_source(path.read_text(), shrink)
            an = analyze_source(src, device=args.backend, profile=False)
            if not an.ok:
                print(f"{name:<28} ANALYSIS: {an.error}")
                failures += 1
                continue
            g = an.graph
            rw = all_rewrites(g)
            g = rw[-1].graph if rw else g
            cand = build_candidate(g, an.data, args.backend)
            d = tempfile.mkdtemp(prefix="kw-check-")
            os.environ["KWRT_LIB"] = _build(cand.files, args.backend, d, args.sanitize)
            kwrt._lib = None
            ref = _module("ref_" + name, src)
            torch.manual_seed(0)
            m = ref.Model(*ref.get_init_inputs()).eval()
            with torch.no_grad():  # non-trivial batch-norm statistics, so folding is exercised
                for mod in m.modules():
                    if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                        mod.running_mean.uniform_(-0.5, 0.5)
                        mod.running_var.uniform_(0.5, 2.0)
            new = _module("new_" + name, cand.files["model_new.py"])
            mn = new.ModelNew(*ref.get_init_inputs()).eval()
            mn.load_state_dict(m.state_dict(), strict=True)
            m, mn = m.to(dev), mn.to(dev)
            ins = [t.to(dev) if torch.is_tensor(t) else t for t in ref.get_inputs()]
            with torch.no_grad():
                a, b = m(*ins), mn(*ins)
            ok = torch.allclose(a, b, atol=1e-4, rtol=1e-4)
            err = (a - b).abs().max().item()
            te, tc = _time(m, ins, dev == "cuda"), _time(mn, ins, dev == "cuda")
            failures += not ok
            print(
                f"{name:<28} {'OK ' if ok else 'BAD'} max_err={err:.2e} eager={te:.4f} ms candidate={tc:.4f} ms "
                f"({te / tc:.2f}x) kernels={len(cand.plan.groups)} rewrites={[r.name for r in rw]}",
                flush=True,
            )
        except Exception as e:  # report and continue with the next task
            failures += 1
            print(f"{name:<28} ERROR {type(e).__name__}: {str(e)[:800]}", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
