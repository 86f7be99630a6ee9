"""Evaluation options and the tolerance presets.

One dataclass travels from the caller (agent, web app, CLI) to both child processes, so the
reference, the baselines and the candidate always run under the same flags and thread count.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BACKENDS = ("auto", "cpu", "cuda")
TORCH_OPS = ("forbid", "allow")
# The task's floating-point precision: "task" keeps the dtypes the task makes; the others cast the
# model's floating parameters and buffers and every floating input to that dtype, in the reference
# and the candidate alike (KernelBench's `precision`), and the preset's tolerance for that dtype applies.
PRECISIONS = ("task", "float32", "bfloat16", "float16")
# The options of a job or an API call that are the sandbox's (EvalOptions fields), passed on as given.
SANDBOX_OPTION_KEYS = ("backend", "torch_ops", "preset", "precision")


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# The shape trial changes the task's module-level int constants that get_inputs/get_init_inputs
# read, except those whose names hold one of these (not sizes of the data; agent.builtin.generalise
# varies the same ones)
SIZE_BLOCKLIST = ("kernel", "stride", "pad", "dilation", "group", "axis", "head", "eps", "seed", "dim")


# Per-dtype tolerances: |candidate - reference| <= atol + rtol * |reference| for every element.
# `default` is strict enough that a TF32 or bf16 downgrade of an fp32 task fails; `kernelbench`
# and `cuda-agent` use KernelBench's 1e-2 (what published numbers were measured with).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "tolerances": {
            "float64": Tolerance(1e-7, 1e-7),
            "float32": Tolerance(1e-4, 1e-4),
            "float16": Tolerance(1e-2, 1e-2),
            "bfloat16": Tolerance(2e-2, 2e-2),
        },
        "random_trials": 5,
        "reinit_trial": True,
        "wide_trial": True,
        "shape_trial": True,
    },
    "kernelbench": {
        "tolerances": {
            "float64": Tolerance(1e-2, 1e-2),
            "float32": Tolerance(1e-2, 1e-2),
            "float16": Tolerance(1e-2, 1e-2),
            "bfloat16": Tolerance(1e-2, 1e-2),
        },
        "random_trials": 5,
        "reinit_trial": False,
        "wide_trial": False,
        "shape_trial": False,
    },
    "cuda-agent": {
        "tolerances": {
            "float64": Tolerance(1e-2, 1e-2),
            "float32": Tolerance(1e-2, 1e-2),
            "float16": Tolerance(1e-2, 1e-2),
            "bfloat16": Tolerance(2e-2, 2e-2),
        },
        "random_trials": 5,
        "reinit_trial": True,
        "wide_trial": True,
        "shape_trial": True,
    },
}


def default_cache_dir() -> str:
    return os.environ.get("KERNELWRIGHT_CACHE") or str(Path.home() / ".cache" / "kernelwright")


def default_timing_cpu() -> int | None:
    """The host's timing CPU, set per gpu worker by `./kw run` (sandbox.placement): unset, timed
    loops run wherever the scheduler puts them."""
    value = os.environ.get("KERNELWRIGHT_TIMING_CPU", "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"KERNELWRIGHT_TIMING_CPU must be a CPU number, got {value!r}") from None


# The log standard deviation of an honest copy's paired speedup between separate evaluations,
# each window pinned to one CPU: cuda measured on the H200 (ninth session, 8 windows each of a
# 2048^2 matmul, a 1.2 ms conv, a 16 us softmax and a 10 us relu, load changed between windows:
# 0.0014-0.0155), taken at 0.01; cpu on the 2-core host under load (docs/benchmarks.md).
WINDOW_SPREAD = {"cuda": 0.01, "cpu": 0.02}


def default_window_spread() -> float | None:
    """KERNELWRIGHT_WINDOW_SPREAD, for a host whose own honest-copy bench measured another spread."""
    value = os.environ.get("KERNELWRIGHT_WINDOW_SPREAD", "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"KERNELWRIGHT_WINDOW_SPREAD must be a number, got {value!r}") from None


@dataclass
class EvalOptions:
    backend: str = "auto"  # "auto" | "cpu" | "cuda"
    torch_ops: str = "forbid"  # "forbid" | "allow"
    preset: str = "default"  # "default" | "kernelbench" | "cuda-agent"
    cache_dir: str = field(default_factory=default_cache_dir)
    correctness_trials: int | None = None  # random trials; None = the preset's
    timing_budget_s: float = 1.0  # time spent in timed calls per callable (adaptive count)
    min_timed_calls: int = 20
    max_timed_calls: int = 1000
    warmup_calls: int = 3
    input_sets: int = 3  # fresh input sets rotated during timing
    compile_baseline: bool = True  # also time torch.compile(Model); slow the first time on CPU
    cpu_threads: int = 0  # 0 = min(4, cores); fixed for reference, baselines and candidate
    allow_tf32: bool = False  # the precision flags every process runs with
    cuda_arch: str = "sm_90"
    eval_timeout_s: float = 300.0  # wall time of one child process
    compile_timeout_s: float = 600.0
    memory_limit_mb: int = 16384  # address space of a child (cpu backend only)
    output_limit_mb: int = 64  # each file a child writes (stdout/stderr included)
    max_processes: int = 1024  # processes + threads of one child (pids cgroup or RLIMIT_NPROC)
    drop_privileges: bool = True  # run children under a throwaway uid when we are root
    network_namespace: bool = True
    zygote: bool = True  # fork children from a pre-imported torch process (ms instead of seconds)
    rtol: float | None = None  # override the preset for every dtype
    atol: float | None = None
    profile: bool = False  # per-kernel table and roofline (profile_candidate sets it)
    device_lock: bool = True  # timed loops hold the device exclusively (sandbox.devlock), so evaluations can share it
    # Every timed loop (eager, torch.compile, candidate) pins its thread to this CPU while it
    # holds the device lock: a host-bound call's time is its launch path on the CPU, which other
    # processes' work on that CPU slows (docs/gpu-pool.md). `./kw run` keeps every other process
    # of ours off it. None: not pinned.
    timing_cpu: int | None = field(default_factory=default_timing_cpu)
    # Paired timing (sandbox.protocol._paired, docs/evaluation.md section 8): eager, torch.compile
    # and the candidate are timed interleaved in this many rounds of one window, each round one
    # block of calls per callable (`timing_budget_s` per callable, spread over the rounds).
    timing_rounds: int = 12
    # The machine counts as noisy when the eager baseline's block medians over the rounds of one
    # window spread by more than this (max / min - 1; 0.25: the slowest round 25% slower than the
    # fastest): its interval is then not trusted, and the milestone is judged on the window's worst
    # pairing (the fastest baseline round over the slowest candidate round; schema.milestone_reward).
    noise_limit: float = 0.25
    precision: str = "task"  # one of PRECISIONS
    # How far apart separate evaluations of an honest copy land: the log standard deviation of its
    # paired speedup between windows (each window a new pair of processes). Added in quadrature
    # to each side of the rounds' bootstrap interval (sandbox.timing.widen). None: the backend's
    # measured default (WINDOW_SPREAD; docs/evaluation.md section 8 and docs/benchmarks.md).
    window_spread: float | None = field(default_factory=default_window_spread)

    def validate(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.torch_ops not in TORCH_OPS:
            raise ValueError(f"torch_ops must be one of {TORCH_OPS}, got {self.torch_ops!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {self.preset!r}")
        if self.correctness_trials is not None and self.correctness_trials < 1:
            raise ValueError("correctness_trials must be at least 1")
        if self.min_timed_calls < 1 or self.max_timed_calls < self.min_timed_calls:
            raise ValueError("need 1 <= min_timed_calls <= max_timed_calls")
        if self.input_sets < 1:
            raise ValueError("input_sets must be at least 1")
        if self.timing_rounds < 3:
            raise ValueError("timing_rounds must be at least 3 (a median ratio and its interval need rounds)")
        if not self.noise_limit > 0:
            raise ValueError("noise_limit must be positive")
        if self.window_spread is not None and not 0 <= self.window_spread < 1:
            raise ValueError(f"window_spread must be in [0, 1), got {self.window_spread}")
        if self.timing_cpu is not None and not 0 <= self.timing_cpu < (os.cpu_count() or 1):
            raise ValueError(
                f"timing_cpu must be a CPU of this host (0..{(os.cpu_count() or 1) - 1}), got {self.timing_cpu}"
            )

    def resolved_backend(self) -> str:
        """This evaluation's backend on this host (resolve_backend): called where it runs."""
        return resolve_backend(self.backend)

    def spread(self, backend: str) -> float:
        """The between-window term of the speedup intervals on this backend (`window_spread`)."""
        return (
            self.window_spread
            if self.window_spread is not None
            else WINDOW_SPREAD.get(backend, max(WINDOW_SPREAD.values()))
        )

    def threads(self) -> int:
        return self.cpu_threads or max(1, min(4, os.cpu_count() or 1))

    def random_trials(self) -> int:
        return self.correctness_trials or PRESETS[self.preset]["random_trials"]

    def tolerance(self, dtype_name: str) -> Tolerance:
        tol = PRESETS[self.preset]["tolerances"].get(dtype_name, Tolerance(0.0, 0.0))
        return Tolerance(
            self.atol if self.atol is not None else tol.atol, self.rtol if self.rtol is not None else tol.rtol
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalOptions:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown evaluation options: {sorted(unknown)}")
        return cls(**data)


def resolve_backend(requested: str, configured: str = "auto") -> str:
    """The one rule for "auto", applied on the host that evaluates (a gpu worker, or the CLI's own
    host; never an agent worker, which may have no GPU): `configured` (a gpu worker's
    KERNELWRIGHT_BACKEND) when it names a backend, else cuda when this host has an NVIDIA device,
    else cpu. Decided from device files without initialising CUDA, so the caller stays fork-safe."""
    for name, value in (("backend", requested), ("configured backend", configured)):
        if value not in BACKENDS:
            raise ValueError(f"{name} must be one of {BACKENDS}, got {value!r}")
    if requested != "auto":
        return requested
    if configured != "auto":
        return configured
    return "cuda" if cuda_present() else "cpu"


def cuda_present() -> bool:
    if os.environ.get("KERNELWRIGHT_FORCE_CPU"):
        return False
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")
