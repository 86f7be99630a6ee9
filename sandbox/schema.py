"""The versioned result of one evaluation: the only shape in which a verdict leaves the sandbox.

The CLI prints it, the agent stores it in trajectory events, the web app stores it in the
database, streams it and exports it. Everything is a dataclass so that there is one place
that says which fields exist; `to_dict()` / `from_dict()` are the only (de)serialisers.

Bump SCHEMA_VERSION when a field changes meaning or is removed; adding a field with a
default is backwards compatible and keeps the version.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

# 2: paired timing. Eager, torch.compile and the candidate are timed interleaved in one window
# (timing.rounds); speedup_vs_eager / speedup_vs_compile are the median of the per-round ratios
# (no longer a ratio of medians taken at different times), `speed` holds their intervals, the
# noise check and the verdict in words; the reward uses the intervals' lower ends. Removed:
# timing.baseline_cached and Stats.samples_ms (no cached baseline enters a result).
SCHEMA_VERSION = "kernelwright.eval/2"

# The milestone reward's margin: "faster" means the interval's lower end above this ratio.
SPEED_MARGIN = 1.05


class Status(enum.StrEnum):
    OK = "ok"  # correct (timing may still show it slower than the baselines)
    INCORRECT = "incorrect"  # ran, but some trial's outputs differ from the reference
    REJECTED = "rejected"  # ran, but broke a rule (torch compute, an exploit, a banned flag)
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"  # raised, crashed, CUDA fault, bad task or candidate file
    TIMEOUT = "timeout"


class Verdict(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"


@dataclass
class CompileError:
    file: str
    line: int | None
    column: int | None
    message: str


@dataclass
class CompileResult:
    ok: bool
    cached: bool = False
    seconds: float = 0.0
    mode: str = ""  # "nvcc" (fast path, no torch headers), "cxx" (cpu fast path), "load_inline", "none"
    artifact_key: str = ""  # content hash of the sources + toolchain + flags
    errors: list[CompileError] = field(default_factory=list)
    log: str = ""  # full log; trim for a model with agent.tools, never here

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a build's meta.json, a Celery worker's answer, a compile event's data)."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompileResult:
        """The result from its JSON form (a build's cached meta.json, an evaluation's `compile`,
        a Celery worker's answer): the one place a CompileResult is rebuilt."""
        d = dict(data)
        d["errors"] = [CompileError(**e) for e in d.get("errors", [])]
        return cls(**d)


@dataclass
class TrialResult:
    index: int
    kind: str  # "random" | "reinit" | "wide" | "shape"
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatched: int | None = None  # number of elements outside the tolerance
    total: int | None = None
    message: str = ""


@dataclass
class Stats:
    """Times of one callable in milliseconds over `trials` timed calls."""

    median_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    std_ms: float
    spread: float  # (p90 - p10) / median: the noise a reader should expect between runs
    trials: int
    # cuda only (sandbox/timing.py): the median time between the call's events, the median
    # device tail added after them (work that outlasted the stream), and the host's idle
    # device-synchronise cost subtracted from each tail; they tell a slow kernel from a slow host.
    # host_median_ms: the host time of the call itself (Python, allocation, launches), which a
    # head start of device work before each call hides from the events; loop_ms: the median time
    # per call of the same function called back to back, the floor of every call's time (a call
    # whose host side outlasts its kernels costs its host time); device_median_ms: the median
    # before that floor; host_limited_calls: timed calls whose host side outlasted the head start
    # (docs/evaluation.md, "Timing")
    event_median_ms: float | None = None
    tail_median_ms: float | None = None
    sync_floor_ms: float | None = None
    host_median_ms: float | None = None
    loop_ms: float | None = None
    device_median_ms: float | None = None
    host_limited_calls: int | None = None
    window: list[float] | None = None  # [start, end] wall-clock seconds of the run, device lock held exclusively
    cpu: int | None = (
        None  # the CPU the timing thread was pinned to for the run (EvalOptions.timing_cpu); None: not pinned
    )


@dataclass
class Round:
    """One round of a paired window: each callable's block median, in the order they ran."""

    order: list[str]  # e.g. ["compile", "candidate", "eager"]
    eager_ms: float | None = None
    compile_ms: float | None = None
    candidate_ms: float | None = None
    # per timed call, the block's wall time on the parent's clock that its own account leaves
    # unexplained (sandbox.timing.unaccounted_ms), per callable
    unaccounted_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Timing:
    # Stats over all the window's timed calls of each callable (every block of every round)
    candidate: Stats | None = None
    eager: Stats | None = None
    compile: Stats | None = None  # torch.compile of the reference
    # "paired": the three were timed interleaved in one window (the only way a speedup is made);
    # "alone": the task's baselines without a candidate (sandbox.baseline)
    mode: str = "paired"
    rounds: list[Round] = field(default_factory=list)
    calls_per_block: dict[str, int] = field(default_factory=dict)  # timed calls per block, per callable
    window: list[float] | None = None  # [start, end] wall-clock seconds of the window, device lock held exclusively
    clock: str = ""  # "cuda_events" or "perf_counter"
    l2_flush: bool = False
    input_sets: int = 0


FASTER, SLOWER, SAME = "faster", "slower", "no measurable difference"


def verdict_of(ci_low: float, ci_high: float) -> str:
    """Faster only when the whole interval lies above 1.0, slower below it; an interval that holds
    1.0 is never a win. The one rule: the sandbox's verdicts and every page that shows one."""
    if ci_low > 1.0:
        return FASTER
    if ci_high < 1.0:
        return SLOWER
    return SAME


@dataclass
class Speedup:
    """The candidate against one baseline, timed in the same rounds: `ratio` is the median over the
    rounds of baseline block median / candidate block median (above 1: the candidate is faster),
    [ci_low, ci_high] its bootstrap 95% interval (seeded, sandbox.timing.paired_speedup)."""

    baseline: str  # "eager" | "compile"
    ratio: float
    ci_low: float
    ci_high: float
    rounds: int
    # "faster" (ci_low > 1), "slower" (ci_high < 1), or "no measurable difference" (the interval holds 1.0)
    verdict: str
    per_round: list[float] = field(default_factory=list)
    # the window's worst pairing: the fastest baseline block median over the slowest candidate
    # block median. Outside load only adds time, so on a noisy window no pairing of its rounds
    # puts the candidate further behind than this; None in results written before it existed.
    worst: float | None = None

    @property
    def faster(self) -> bool:
        """Faster by the reward's margin: the interval's LOWER end above SPEED_MARGIN."""
        return self.ci_low > SPEED_MARGIN


@dataclass
class Speed:
    """What the paired window says about speed, and what the reward may take from it."""

    vs_eager: Speedup | None = None
    vs_compile: Speedup | None = None
    rounds: int = 0
    # the eager baseline's block medians over the rounds: max / min - 1; above noise_limit the
    # machine did not hold still, and the reward is judged on Speedup.worst, not the interval
    noise: float = 0.0
    noise_limit: float = 0.0
    noisy: bool = False
    verdict: str = ""  # in words, e.g. "1.48x faster than eager (95% interval 1.41-1.55x, 12 rounds); ..."
    milestone: str = ""  # why the reward is what it is (e.g. judged on the worst pairing on a noisy machine)


@dataclass
class Audit:
    aten_ops: list[str] = field(default_factory=list)  # ops the candidate's forward dispatched
    torch_compute_ops: list[str] = field(default_factory=list)  # the subset that computes
    kernels: list[str] = field(default_factory=list)  # device kernels / native calls that ran
    custom_kernel_ran: bool = False
    graph_launches: int = 0  # CUDA graph launches in the profiled forward (cuda)
    findings: list[str] = field(default_factory=list)  # each suspicious thing, in words


@dataclass
class ProfileRow:
    name: str
    calls: int
    total_ms: float
    share: float  # fraction of the candidate's device time


@dataclass
class Roofline:
    device: str = ""
    flops: float = 0.0
    min_bytes: float = 0.0
    peak_bandwidth_gbs: float = 0.0  # measured on this worker, not a datasheet value
    peak_tflops: float = 0.0  # measured, for the task's dtype and math mode
    floor_ms: float = 0.0  # max(flops / peak, bytes / bandwidth)
    bound: str = ""  # "memory" or "compute"
    candidate_ms: float | None = None
    fraction_of_sol: float | None = None  # floor_ms / candidate_ms, in (0, 1]
    note: str = ""  # why the floor is not max(flops / peak, bytes / bandwidth), when it is not


@dataclass
class EvalResult:
    status: Status
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    schema: str = SCHEMA_VERSION
    backend: str = ""  # "cpu" | "cuda"
    device: str = ""  # e.g. "NVIDIA H200" or the CPU model
    device_id: str = ""  # which device exactly: "gpu-<UUID>" or "cpu" (the device lock's name)
    torch_version: str = ""
    # how the untrusted code was contained: "bubblewrap", or "uncontained (...)" under the opt-out
    containment: str = ""
    task_hash: str = ""
    candidate_hash: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    compile: CompileResult | None = None
    trials: list[TrialResult] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)
    # paired (schema 2): the median per-round ratio, speed.vs_eager.ratio; its interval is in `speed`
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speed: Speed | None = None
    reward: int = -1
    audit: Audit = field(default_factory=Audit)
    profile: list[ProfileRow] = field(default_factory=list)
    roofline: Roofline | None = None
    duration_s: float = 0.0
    phases_s: dict[str, float] = field(
        default_factory=dict
    )  # wall seconds per protocol step (where an evaluation's time goes)

    @property
    def correct(self) -> bool:
        return self.status == Status.OK

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"unsupported evaluation schema {data.get('schema')!r}, expected {SCHEMA_VERSION!r}")
        d = dict(data)
        d["status"] = Status(d["status"])
        d["verdict"] = Verdict(d["verdict"])
        if d.get("compile") is not None:
            d["compile"] = CompileResult.from_dict(d["compile"])
        d["trials"] = [TrialResult(**t) for t in d.get("trials", [])]
        t = dict(d.get("timing") or {})
        for key in ("candidate", "eager", "compile"):
            if t.get(key) is not None:
                t[key] = Stats(**t[key])
        t["rounds"] = [Round(**r) for r in t.get("rounds") or []]
        d["timing"] = Timing(**t)
        if d.get("speed") is not None:
            sp = dict(d["speed"])
            for key in ("vs_eager", "vs_compile"):
                if sp.get(key) is not None:
                    sp[key] = Speedup(**sp[key])
            d["speed"] = Speed(**sp)
        d["audit"] = Audit(**(d.get("audit") or {}))
        d["profile"] = [ProfileRow(**r) for r in d.get("profile", [])]
        if d.get("roofline") is not None:
            d["roofline"] = Roofline(**d["roofline"])
        return cls(**d)


def _plain(value: Any) -> Any:
    """Enums to their values so that json.dumps needs no custom encoder."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _lower_end(speedup: Speedup | float | None, noisy: bool) -> float | None:
    """What the reward judges: the interval's lower end; on a noisy window the worst pairing of
    its rounds (None where there is none: a plain number, a result written before it existed)."""
    if speedup is None:
        return None
    if isinstance(speedup, Speedup):
        return speedup.worst if noisy else speedup.ci_low
    return None if noisy else float(speedup)


def milestone_reward(
    correct: bool,
    speedup_vs_eager: Speedup | float | None,
    speedup_vs_compile: Speedup | float | None,
    noisy: bool = False,
) -> int:
    """The CUDA Agent paper's reward: -1 incorrect, 1 correct, 2 if >5% faster than eager,
    3 if >5% faster than both eager and torch.compile. "Faster" is judged on the paired
    interval's LOWER end (a Speedup's ci_low; a plain number is taken as that lower end), so an
    interval that reaches down to 1.05 or below earns nothing for speed. On a noisy window
    (Speed.noisy) the bootstrap interval is not trusted and "faster" is judged on the worst
    pairing of the window's rounds (Speedup.worst) instead; without one, no speed milestone."""
    if not correct:
        return -1
    eager, compiled = _lower_end(speedup_vs_eager, noisy), _lower_end(speedup_vs_compile, noisy)
    faster_eager = eager is not None and eager > SPEED_MARGIN
    faster_compile = compiled is not None and compiled > SPEED_MARGIN
    if faster_eager and faster_compile:
        return 3
    if faster_eager:
        return 2
    return 1
