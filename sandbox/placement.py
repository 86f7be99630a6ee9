"""Which CPU each GPU's timed loops run on, and which CPUs every other process gets.

Why: a host-bound call's time is its launch path on the CPU, and the H200 host's CPUs differed by
1.53x in launch cost (docs/benchmarks.md, seventh session). With `./kw run --timing-cpus` (or
`python -m benchmarks.pool_bench --timing-cpus`) each GPU gets one CPU of its own: every timed loop
for that GPU (eager, torch.compile, candidate; one at a time under the device lock) pins its
thread there (EvalOptions.timing_cpu) and every other process of ours runs on the remaining
CPUs. Baselines are cached per timing CPU, so a candidate is compared with a baseline timed on
the same CPU. Measured on the two-H200 host, it changed nothing that the run-to-run noise did not
(docs/gpu-pool.md): an option, not the default.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


def parse_cpulist(text: str) -> set[int]:
    """ "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part.strip():
            lo, _, hi = part.strip().partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus: set[int]) -> str:
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(cpu)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def gpu_local_cpus(index: str = "0") -> set[int] | None:
    """CPUs the kernel lists as local to the GPU's PCI device (None when unknown)."""
    try:
        bus = subprocess.run(
            ["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not bus:
        return None
    path = Path("/sys/bus/pci/devices") / bus.lower()[-12:] / "local_cpulist"  # "00000000:19:00.0" -> "0000:19:00.0"
    try:
        return parse_cpulist(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class TimingPlan:
    timing_cpu: dict[str, int]  # GPU id (as CUDA_VISIBLE_DEVICES names it) -> its timing CPU
    others: set[int]  # every other process of ours

    def describe(self) -> str:
        pins = ", ".join(f"GPU {gpu} -> CPU {cpu}" for gpu, cpu in self.timing_cpu.items())
        return f"timing CPUs: {pins}; everything else on CPUs {format_cpulist(self.others)}"


def timing_plan(
    gpus: Sequence[str],
    available: set[int] | None = None,
    local: Callable[[str], set[int] | None] = gpu_local_cpus,
    spare: int = 2,
) -> TimingPlan | None:
    """One timing CPU per GPU, the highest-numbered free CPU local to it (CPU 0 takes most of a
    host's housekeeping), keeping at least `spare` CPUs for everything else; None when the host
    has too few CPUs to give any away."""
    available = set(os.sched_getaffinity(0) if available is None else available)
    if not gpus or len(available) < len(gpus) + spare:
        return None
    taken: dict[str, int] = {}
    for gpu in gpus:
        free = available - set(taken.values())
        near = (local(gpu) or set()) & free
        taken[gpu] = max(near or free)
    return TimingPlan(taken, available - set(taken.values()))


def window_cpu_for(
    device_id: str, gpus: Sequence[str] | None = None, available: set[int] | None = None, spare: int = 2
) -> int | None:
    """The CPU a GPU's paired windows run on when no timing CPU is configured: the GPU's place
    among the host's GPUs (sorted UUIDs) counted down from the highest CPU this process may use,
    so windows on different GPUs never share a CPU and every window of one GPU uses the same one.

    Why pin at all: the reference and the candidate are two processes, and unpinned each ran
    wherever the scheduler put it; on the H200 host an honest copy of a 16 us softmax then read
    0.71x to 1.31x from one evaluation to the next, each with a tight interval (between-window log
    spread 0.196); with both on one CPU, 0.97x to 1.02x (0.016), every interval holding 1.0
    (docs/benchmarks.md, ninth session). None when the host has too few CPUs to spare one."""
    from .devlock import _normal_uuid, host_gpu_uuids

    cpus = sorted(os.sched_getaffinity(0) if available is None else available)
    known = sorted(_normal_uuid(g) for g in (host_gpu_uuids() if gpus is None else gpus))
    me = _normal_uuid(device_id) if device_id else ""
    place = known.index(me) if me in known else 0
    if len(cpus) < place + 1 + spare:
        return None
    return cpus[-(1 + place)]
