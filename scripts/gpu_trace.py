"""Summarise a `nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu
--format=csv,noheader -l 1` trace: how much of the device's memory and compute a run used.

    python3 scripts/gpu_trace.py gpu.csv

Why: on a shared GPU the memory admission (sandbox/devmem.py) sizes each evaluation's share from
an estimate; this says whether the memory it holds back is memory that stays free.
"""

from __future__ import annotations

import sys


def summarise(lines: list[str]) -> str:
    used, util, total = [], [], 0
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[1].endswith("MiB"):
            continue
        used.append(int(parts[1].split()[0]))
        total = int(parts[2].split()[0])
        util.append(int(parts[3].split()[0]))
    if not used:
        return "gpu trace: no samples"
    s = sorted(used)
    q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    busy = sum(1 for u in util if u >= 50) / len(util)
    return (
        f"gpu trace: {len(used)} samples (1 s); memory used of {total / 1024:.0f} GiB: median "
        f"{q(s, 0.5) / 1024:.1f}, p90 {q(s, 0.9) / 1024:.1f}, max {s[-1] / 1024:.1f} GiB; utilisation "
        f"mean {sum(util) / len(util):.0f}%, at least 50% in {100 * busy:.0f}% of samples"
    )


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        print(summarise(fh.readlines()))
