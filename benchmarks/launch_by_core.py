"""`python -m benchmarks.launch_by_core`: host time of a kernel launch, pinned to each CPU in turn.

Why: on the H200 host the host time per call of the same small forward differed by up to 2x
between evaluation processes (docs/benchmarks.md, sixth session), and host-bound candidates and
baselines carry that into their ratios. One suspect is where the process runs: a CPU on the
other NUMA node from the GPU (or a vCPU sharing a core) pays more per launch. This prints, per
CPU, the median host microseconds per launch of a one-element add (launches issued back to
back, one synchronise per batch), next to the CPU's NUMA node and whether it is in the GPU's
`local_cpulist`. Numbers are printed, never asserted. Without CUDA it times the same add on the
CPU, which only checks the script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from sandbox.placement import gpu_local_cpus

_CHILD = r"""
import json, os, sys, time, torch
os.sched_setaffinity(0, {{{cpu}}})
cuda = torch.cuda.is_available()
x = torch.zeros(1, device="cuda" if cuda else "cpu")
sync = torch.cuda.synchronize if cuda else (lambda: None)
for _ in range(200):
    x.add_(1)
sync()
per = []
for _ in range(7):
    t0 = time.perf_counter()
    for _ in range({calls}):
        x.add_(1)
    t1 = time.perf_counter()
    sync()
    per.append((t1 - t0) / {calls} * 1e6)
print(json.dumps(sorted(per)))
"""


def numa_node(cpu: int) -> str:
    for node in Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node*"):
        return node.name[4:]
    return "?"


def measure(cpu: int, calls: int) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(cpu=cpu, calls=calls)], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}")
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.launch_by_core")
    parser.add_argument("--calls", type=int, default=2000, help="launches per batch (7 batches per CPU)")
    parser.add_argument("--cpus", type=int, nargs="*", help="default: every CPU this process may use")
    parser.add_argument("--out", default="", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    cpus = args.cpus or sorted(os.sched_getaffinity(0))
    local = gpu_local_cpus("0")
    rows = []
    print(f"{'cpu':>4} {'node':>4} {'gpu-local':>9} {'median us':>10} {'min us':>8} {'max us':>8}")
    for cpu in cpus:
        try:
            per = measure(cpu, args.calls)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"{cpu:>4} failed: {exc}")
            continue
        row = {
            "cpu": cpu,
            "node": numa_node(cpu),
            "gpu_local": None if local is None else cpu in local,
            "median_us": statistics.median(per),
            "min_us": per[0],
            "max_us": per[-1],
        }
        rows.append(row)
        flag = "?" if row["gpu_local"] is None else ("yes" if row["gpu_local"] else "no")
        print(
            f"{cpu:>4} {row['node']:>4} {flag:>9} {row['median_us']:>10.2f} {row['min_us']:>8.2f} {row['max_us']:>8.2f}"
        )
    if rows:
        meds = [r["median_us"] for r in rows]
        print(f"slowest CPU / fastest CPU: {max(meds) / min(meds):.2f}x over {len(rows)} CPUs")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
