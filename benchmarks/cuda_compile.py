"""nvcc on every CUDA candidate the built-in policy would write, on a machine without a GPU.

    bash scripts/cuda_toolchain.sh && export PATH=$PWD/.cuda/bin:$PATH
    python -m benchmarks.cuda_compile --blocks --kernelbench .kernelbench/kb/KernelBench --level 1 2 3
    python -m benchmarks.cuda_compile --kernelbench DIR --problems 1/23 --torch-ops forbid --out c.json

Compiling needs no GPU, and a candidate that does not compile costs a device turn (and, for a
prelude every candidate includes, every turn). Per task: the reference captured on the CPU
(KernelBench sizes shrunk to --cap, as benchmarks.kernelbench does), the policy's plan made for
the cuda backend (BuiltinPolicy.planned_candidates: every rewrite, GEMM form and launch
variant), and each distinct set of kernel files built by the sandbox's own build step
(sandbox.build.build: the same nvcc command, inside the same containment, as on a GPU host).
Prints one line per task and the failures with their first compiler error; exits 1 on any.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.builtin import BuiltinPolicy
from agent.policy import TaskInfo
from benchmarks.kernelbench import BLOCKS_DIR, kernelbench_paths, shrink_ints
from sandbox import EvalOptions, cache
from sandbox.build import build


def kernel_files(files: dict[str, str]) -> dict[str, str]:
    return {p: t for p, t in files.items() if p.startswith("kernels/")}


def compile_task(path: Path, torch_ops: str, cap: int, cache_dir: str) -> dict[str, Any]:
    """One task's row: its candidates, how many distinct kernel sets were built, and each
    failure's title and first error."""
    t0 = time.time()
    source = path.read_text()
    if cap and path.parent != BLOCKS_DIR:
        source = shrink_ints(source, cap)
    pol = BuiltinPolicy(profile_reference=False, max_variants=3)
    pol.reset(TaskInfo(path.stem, source, "cuda", {"torch_ops": torch_ops, "preset": "kernelbench"}), [], [])
    row: dict[str, Any] = {"name": path.stem, "torch_ops": torch_ops, "candidates": 0, "built": 0, "failures": []}
    if pol.analysis is None or not pol.analysis.ok:
        row["not_captured"] = (pol.analysis.error if pol.analysis else "")[:300]
        return row | {"seconds": round(time.time() - t0, 1)}
    seen: set[str] = set()
    opts = EvalOptions(backend="cuda", torch_ops=torch_ops, cache_dir=cache_dir)
    for title, files in pol.planned_candidates():
        row["candidates"] += 1
        kernels = kernel_files(files)
        key = cache.files_hash(kernels)
        if not kernels or key in seen:
            continue
        seen.add(key)
        res, _ = build(files, opts)
        row["built"] += 1
        if not res.ok:
            first = next((e.message for e in res.errors), res.log[-300:])
            row["failures"].append({"candidate": title, "error": f"{first}"[:500], "log": res.log[-4000:]})
    return row | {"seconds": round(time.time() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="nvcc on every CUDA candidate of the built-in policy (no GPU needed).")
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench checkout (the folder holding level1..level3)")
    ap.add_argument("--level", type=int, nargs="*", default=[1, 2, 3])
    ap.add_argument("--problems", nargs="*", default=[], help="LEVEL/NUMBER, e.g. 1/23 2/11")
    ap.add_argument("--blocks", action="store_true", help="benchmarks/blocks/*.py")
    ap.add_argument("--torch-ops", nargs="+", choices=("allow", "forbid"), default=["forbid", "allow"])
    ap.add_argument("--cap", type=int, default=256, help="KernelBench sizes shrunk to at most this (0: as written)")
    ap.add_argument("--shard", help="K/N: every N-th task from the K-th")
    ap.add_argument("--out", help="JSON with every task's row")
    args = ap.parse_args(argv)
    if shutil.which("nvcc") is None:
        ap.error("no nvcc on PATH: bash scripts/cuda_toolchain.sh && export PATH=$PWD/.cuda/bin:$PATH")
    paths: list[Path] = []
    if args.kernelbench is not None:
        paths += kernelbench_paths(args.kernelbench, args.level, args.problems, 0, 0, every=not args.problems)
    if args.blocks:
        paths += sorted(BLOCKS_DIR.glob("*.py"))
    if not paths:
        ap.error("nothing to compile: give --kernelbench and/or --blocks")
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        paths = paths[k::n]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kw-nvcc-") as cache_dir:
        for p in paths:
            for ops in args.torch_ops:
                try:
                    row = compile_task(p, ops, args.cap, cache_dir)
                except Exception as exc:  # a planner bug is a finding too, not the end of the sweep
                    row = {"name": p.stem, "torch_ops": ops, "error": f"{type(exc).__name__}: {exc}"[:500]}
                rows.append(row)
                state = row.get("error") or ("not captured" if "not_captured" in row else "")
                bad = len(row.get("failures", []))
                print(
                    f"{row['name']:<56} {ops:<6} candidates={row.get('candidates', 0):<3} "
                    f"built={row.get('built', 0):<3} failed={bad} {state[:80]}",
                    flush=True,
                )
                for f in row.get("failures", []):
                    print(f"    {f['candidate']}: {f['error'][:300]}", flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps({"tasks": rows}, indent=1))
    built = sum(r.get("built", 0) for r in rows)
    failed = [r for r in rows if r.get("failures") or r.get("error")]
    print(
        f"\n{len(rows)} task runs, {sum(r.get('candidates', 0) for r in rows)} candidates, {built} distinct kernel "
        f"sets built by nvcc, {sum(len(r.get('failures', [])) for r in rows)} failed to compile, "
        f"{sum(1 for r in rows if r.get('error'))} planner errors, "
        f"{sum(1 for r in rows if 'not_captured' in r)} not captured"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
