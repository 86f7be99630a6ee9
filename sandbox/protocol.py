"""The evaluation protocol, in the order it runs (the one file to read; docs/evaluation.md
states the same in prose).

 1. scan      static scan of the candidate's sources for tampering techniques -> rejected (before
              anything of the candidate runs: a load_inline build imports model_new.py)
 2. compile   build the candidate (cached by content hash); errors -> compile_error; the built
              libraries' imported symbols scanned -> rejected
 3. start     two isolated children: REFERENCE (task code) and CANDIDATE (candidate code)
 4. reference draws inputs from secret seeds, one trial at a time: 5+ random trials, a reinit
              trial (other weights), a wide-distribution trial, two shape trials (size constants
              scaled down and up); it never talks to the candidate, the parent forwards the
              descriptors of its sealed memfds (sandbox.shared) without reading them
 6. trials    the candidate runs each trial (inputs + the reference's state_dict) and returns its
              outputs by sealed memfd; the REFERENCE compares them with the expected outputs,
              which never leave it; the candidate reports aliasing, input mutation, late writes,
              subclass outputs, dispatched aten ops, custom kernel calls, flag changes, tampering
 5. baseline  after the trials: the timing input sets (kept on both devices), then the reference
              builds torch.compile (its first call compiles); nothing is cached
 7. audit     torch-ops=forbid: compute ops -> rejected; no custom kernel ran -> rejected
 8. timing    only for correct, unrejected candidates, paired: eager and torch.compile (in the
              reference child) and the candidate (in its child) timed interleaved in ONE window,
              the device lock held throughout, the child not timing stopped: a warm-up each,
              then `timing_rounds` rounds of one block per callable in rotated order; a ratio
              per round, the median ratio with a bootstrap 95% interval (judge_speed); every
              timed call's output is fingerprinted and checked against the expected outputs,
              and custom kernels must run in every timed call
 9. roofline  FLOPs and minimal bytes against measured ceilings; profile table if asked
10. reward    sandbox.schema.milestone_reward on the intervals' lower ends; where the eager
              baseline's rounds spread by more than noise_limit (a noisy machine), on the
              window's worst pairing (fastest baseline round over slowest candidate round)
"""

from __future__ import annotations

import contextlib
import math
import re
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import audit, cache, compile_cache, containment, devlock, devmem
from .build import Artifacts, build
from .channel import ChannelClosed, ChannelTimeout, MessageTooLarge, Traffic
from .isolation import Child, Limits, start_child
from .limits import cpus_for
from .options import PRESETS, EvalOptions
from .schema import (
    SPEED_MARGIN,
    EvalResult,
    ProfileRow,
    Roofline,
    Round,
    Speed,
    Speedup,
    Stats,
    Status,
    TrialResult,
    Verdict,
    milestone_reward,
    verdict_of,
)
from .timed_checks import FAULT_HANDLER_WHY, FOREIGN_WHY
from .timing import (
    REWARM_BELOW_MS,
    calls_per_block,
    loop_floor_ms,
    paired_speedup,
    round_noise,
    round_order,
    unaccounted_ms,
)

Progress = Callable[[str, dict], None]

REJECT_STATIC = True
# sandbox.audit_hook in the candidate's process; off only where tests probe the walls behind it
# (tests/sandbox/escape), as REJECT_STATIC is for the static scan
RUN_TIME_REFUSALS = True

# findings that are reported but never block: techniques a fair kernel may use
_REPORTED_ONLY = ("native threads", "CUDA streams", "math mode")


def static_scan(files: dict[str, str], torch_ops: str) -> tuple[list[str], list[str]]:
    """(findings, blocking) of the sources' static scan: every finding, and those that stop an
    evaluation (or a build: sandbox.compile_candidate) because they can subvert it. It runs
    before the build, since building a load_inline candidate imports its model_new.py."""
    static = audit.scan_source(files)
    native = audit.scan_native(files) + audit.scan_dispatch(files, torch_ops)
    blocking = list(static) + [f for f in native if not any(w in f for w in _REPORTED_ONLY)]
    return static + native, blocking if REJECT_STATIC else []


def static_rejection(blocking: list[str]) -> str:
    """The reason given for a blocked scan, the same for an evaluation and a build."""
    return "the candidate's source uses a technique that can subvert the evaluation: " + "; ".join(blocking[:5])


# what reading a reply of the wrong form raises: children write their own sockets, and candidate
# code in a child can write there too (red team parent_memory), so no reply is trusted to have
# the keys and types the protocol expects
MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError, RecursionError)


def malformed_reply(exc: BaseException) -> str:
    """The reason given for a reply of the wrong form, with where the parent tripped on it."""
    import traceback

    where = traceback.extract_tb(exc.__traceback__)[-1]
    return (
        f"a child's reply did not have the form the protocol expects ({type(exc).__name__}: {str(exc)[:200]} "
        f"at {Path(where.filename).name}:{where.lineno}): a reply forged on its channel, or a broken child"
    )


class _Stop(Exception):
    """Ends the protocol early with a status and reason."""

    def __init__(self, status: Status, reason: str, trial: TrialResult | None = None):
        super().__init__(reason)
        self.status, self.reason, self.trial = status, reason, trial


def _torch_version() -> str:
    import torch

    return torch.__version__


# torch.compile's caches, carried between evaluations of one task: sandbox.compile_cache.


def _limits(options: EvalOptions, backend: str) -> Limits:
    threads = options.threads()
    return Limits(
        wall_s=options.eval_timeout_s,
        cpu_s=int(options.eval_timeout_s * (threads + 1)) + 60,
        fsize_mb=options.output_limit_mb,
        nproc=options.max_processes,
        address_space_mb=options.memory_limit_mb if backend == "cpu" else None,
        cpus=cpus_for(options, backend),  # the baseline's CPUs, no more (limits.cpus_for)
    )


def _child_env(options: EvalOptions, backend: str) -> dict[str, str]:
    import os

    n = str(options.threads())
    # inductor compiles in-process: its worker pool would need hundreds of threads under the
    # process limit, and one compile per task (the baseline is cached) does not need it. Only a
    # fresh `python -m sandbox.worker` reads this; zygote children inherit inductor's config from
    # the zygote, so worker._configure_inductor sets it (and the other settings) in-process.
    env = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "KW_BACKEND": backend, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    if (
        options.device_lock
    ):  # the folder the parent holds the lock in for its children (isolation.Child), never passed on
        env["KW_LOCK_DIR"] = devlock.prepare_dir()
    if os.environ.get("KW_TRACE"):
        env["KW_TRACE"] = "1"
    if os.environ.get("KERNELWRIGHT_DEVICE_SHARE") == "0":  # the bench's comparison: cuda tensors by host memfd
        env["KW_DEVICE_SHARE"] = "0"
    return env


def _opts_msg(options: EvalOptions) -> dict:
    d = options.to_dict()
    d["_threads"] = options.threads()
    return d


def _recv(child: Child, who: str, stage: str) -> Any:
    """A child's reply, or a _Stop saying how it failed (crash, timeout, too much data)."""
    try:
        return child.recv(max_bytes=1 << 34)
    except ChannelTimeout:
        child.kill()
        raise _Stop(
            Status.TIMEOUT, f"{who} did not finish {stage} within the {child.limits.wall_s:.0f} s limit (killed)"
        ) from None
    except (ChannelClosed, EOFError):
        how = child.exit_description()
        tail = child.log_tail(1500).strip()
        if "SIGSEGV" in how and who == "the candidate":
            how += (
                " (trial and timing inputs are mapped read-only from the reference's sealed memfd: a forward that "
                "writes to an input faults)"
            )
        raise _Stop(
            Status.RUNTIME_ERROR,
            f"{who} died during {stage}: {how}" + (f"\n--- its output (tail) ---\n{tail}" if tail else ""),
        ) from None
    except MessageTooLarge as exc:
        child.kill()
        raise _Stop(Status.REJECTED, f"{who} sent too much data during {stage}: {exc}") from None
    except Exception as exc:  # an undecodable message (e.g. a pickled object): never trusted
        child.kill()
        raise _Stop(
            Status.REJECTED, f"{who} sent a malformed message during {stage}: {type(exc).__name__}: {str(exc)[:300]}"
        ) from None


def _send(child: Child, obj: Any, who: str, stage: str) -> None:
    try:
        child.send(obj)
    except ChannelClosed:
        how = child.exit_description()
        raise _Stop(Status.RUNTIME_ERROR, f"{who} died before {stage}: {how}\n{child.log_tail(1500)}") from None


def _user_error(reply: dict, who: str) -> str:
    where = (
        f" ({reply['file']}:{reply['line']})"
        if reply.get("file") and reply.get("line")
        else (f" ({reply['file']})" if reply.get("file") else "")
    )
    return f"{who}{where}: {reply.get('error', 'failed')}"


def _seeds(options: EvalOptions) -> dict:
    """Fresh secret seeds per evaluation; they exist only here and in the reference child."""
    r = secrets.SystemRandom()

    def s() -> int:
        return r.randrange(1, 2**62)

    return {
        "weights": s(),
        "reinit": s(),
        "reinit_inputs": s(),
        "wide": s(),
        "shape": s(),
        "shape_inputs": s(),
        "random": [s() for _ in range(options.random_trials())],
        "timing": [s() for _ in range(options.input_sets)],
    }


def _window_cpu(options: EvalOptions, backend: str, device_id: str = "") -> dict:
    """The CPU every timed loop of a window runs on, for the children's timing set-up. The
    configured timing CPU (strict: an unusable one is an error); else, on the cpu backend with one
    thread, the evaluator's last CPU for every window (the device lock "cpu" lets one window run
    at a time on the host): unpinned, the reference and the candidate ran wherever the scheduler
    kept them, and on a loaded 2-core host an honest copy of the reference read 1.13x with an
    interval of 1.10-1.22 (the two processes on CPUs with different loads); pinned to one CPU, 12
    of 12 copies held 1.0 (docs/evaluation.md section 8). With more threads the pin would hold the
    calling thread only, and the intra-op pool's other threads could land on its CPU (a 0.02 ms
    softmax then took 8 ms a call): unpinned. cuda without a timing CPU: the GPU's own CPU
    (placement.window_cpu_for: windows on different GPUs never share one), not strict."""
    import os

    if options.timing_cpu is not None:
        return {"cpu": options.timing_cpu, "strict_cpu": True}
    if backend == "cpu" and options.threads() == 1:
        return {"cpu": max(os.sched_getaffinity(0)), "strict_cpu": False}
    if backend == "cuda":
        from .placement import window_cpu_for

        return {"cpu": window_cpu_for(device_id), "strict_cpu": False}
    return {"cpu": None, "strict_cpu": False}


WHO = {"eager": "the reference (task)", "compile": "the reference (task)", "candidate": "the candidate"}
LOCK_WAIT_TIMEOUTS = 3  # a paired window waits at most this many eval_timeout_s for the device


@contextlib.contextmanager
def _window_lock(lock: devlock.DeviceLock, on_wait: Any, wait_s: float) -> Iterator[None]:
    """The device held exclusively for a paired window, or a timeout result past `wait_s`."""
    try:
        took = lock.acquire(True, on_wait, deadline_s=wait_s)
    except devlock.LockTimeout:
        raise _Stop(
            Status.TIMEOUT, f"the device stayed busy for {wait_s:.0f} s (its lock was held); no timing window"
        ) from None
    try:
        yield
    finally:
        if took:
            lock.release()


# a block's measured calls and pass against its wall time: the child's clock and the parent's
# are one clock, read on either side of the messages; 1% covers the events' resolution
BLOCK_WALL_SLACK = 1.01


class _Paired:
    """The parent's side of paired timing [sandbox.timing, docs/evaluation.md section 8]: eager and
    torch.compile run in the reference child (trusted baseline code never runs in the candidate's
    process), the candidate in the candidate child; the parent asks each child in turn, over the
    sockets, for a warm-up and then for one block of calls per callable per round, in an order
    rotated per round. It holds the device lock exclusively for the whole window (the children's
    timers take none), and keeps the child that is not timing stopped (Child.pause), so neither
    side's leftover threads run during the other's calls."""

    def __init__(self, ref: Child, cand: Child | None, names: list[str], options: EvalOptions, device_id: str):
        self.options, self.names = options, list(names)
        self.owner = {n: (cand if n == "candidate" else ref) for n in self.names}
        self.children = [ref] + ([cand] if cand is not None else [])
        self.paused = {id(c): False for c in self.children}
        self.lock = (
            devlock.DeviceLock(device_id or "device", devlock.prepare_dir()) if options.device_lock else devlock.NO_LOCK
        )
        self.est_ms: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.rounds: list[Round] = []
        self.window: list[float] | None = None
        self.findings: list[str] = []

    def _switch_to(self, child: Child) -> None:
        for c in self.children:
            stop = c is not child
            if self.paused[id(c)] != stop:
                if not c.pause(stop):  # an unpaused neighbour would run beside the timed calls
                    why = getattr(c.proc, "lost", "") or "the zygote that forked it does not answer"
                    raise _Stop(Status.RUNTIME_ERROR, f"the {c.role} could not be paused for the timing window: {why}")
                self.paused[id(c)] = stop

    def _ask(self, name: str, msg: dict, stage: str) -> dict:
        return self._ask_timed(name, msg, stage)[0]

    def run(self, progress: Progress | None = None) -> None:
        o = self.options
        try:
            # a window that must wait for another evaluation's says so ("device_wait"), then "timing" again
            on_wait = (lambda waiting: progress("device_wait" if waiting else "timing", {})) if progress else None
            # only trusted processes hold the lock (sandbox.devlock): the deadline is for a
            # holder of ours that hangs, a queue of other evaluations' windows fits well inside it
            wait_s = LOCK_WAIT_TIMEOUTS * o.eval_timeout_s
            with _window_lock(self.lock, on_wait, wait_s):
                t0 = time.time()
                for name in list(self.names):
                    reply = self._ask(
                        name,
                        {
                            "cmd": "warm",
                            "budget_s": o.timing_budget_s,
                            "max_calls": o.max_timed_calls,
                            "warmup": max(o.warmup_calls, 3) if name == "compile" else o.warmup_calls,
                        },
                        "the warm-up",
                    )
                    if not reply.get("ok") and name == "compile":  # no compile baseline, the rest still times
                        self.findings.append(
                            f"torch.compile baseline failed during its warm-up: {reply.get('error', '')[:1500]}"
                        )
                        self.names.remove(name)
                        continue
                    self._check(name, reply)
                    self.est_ms[name] = float(reply["est_ms"])
                    self.calls[name] = calls_per_block(
                        self.est_ms[name], o.timing_budget_s, o.timing_rounds, o.min_timed_calls, o.max_timed_calls
                    )
                for r in range(o.timing_rounds):
                    order = round_order(self.names, r)
                    medians: dict[str, float] = {}
                    unaccounted: dict[str, float] = {}
                    for name in order:
                        rewarm = 1 if self.est_ms[name] < REWARM_BELOW_MS else 0
                        msg = {"cmd": "block", "calls": self.calls[name], "rewarm": rewarm}
                        reply, wall_ms = self._ask_timed(name, msg)
                        self._check(name, reply)
                        medians[name] = self._block_median(name, reply, wall_ms)
                        unaccounted[name] = unaccounted_ms(wall_ms, reply, medians[name], rewarm)
                    self.rounds.append(
                        Round(order=order, unaccounted_ms=unaccounted, **{f"{n}_ms": m for n, m in medians.items()})
                    )
                    if progress:
                        progress("timing", {"round": r + 1, "of": o.timing_rounds})
                self.window = [t0, time.time()]
        finally:
            for c in self.children:
                if self.paused[id(c)]:
                    c.pause(False)
                    self.paused[id(c)] = False

    def _ask_timed(self, name: str, msg: dict, stage: str = "timing") -> tuple[dict, float]:
        """A child's reply and its wall time on this process's clock, from the request sent
        (the child already running) to the reply read."""
        child = self.owner[name]
        assert child is not None, f"{name} has no child"  # the candidate's, when it is timed
        self._switch_to(child)
        t0 = time.perf_counter()
        _send(child, {**msg, "which": name}, WHO[name], stage)
        reply = _recv(child, WHO[name], stage)
        return reply, (time.perf_counter() - t0) * 1000.0

    def _block_median(self, name: str, reply: dict, wall_ms: float) -> float:
        """The block's median, once its account is one a timer could have kept: finite, as many
        calls as asked, half of them at least the median (so the sum holds half the calls times
        the median), no median below the back-to-back pass's time per call (charge_loop), that
        pass's median no more than its own sum allows (loop_floor_ms), the charged sum between
        the measured one (`raw_ms`) and that with each call raised to the pass's time, and no
        more measured time in its calls and pass than the block took on this process's clock (a
        sum padded past it would hide time moved out of the median; red team 2026-12-06). Measured
        sums, not charged ones: a host-bound call is charged the pass's time, which it did not
        spend in the block, and the pass's median times its calls can exceed what the pass took
        (DenseNet, LSTM and GRU tasks were rejected as forged, 2026-12-07)."""
        keys = ("median_ms", "sum_ms", "raw_ms", "loop_ms", "loop_sum_ms", "calls")
        median, total, raw, loop, loop_sum, n = (float(reply[k]) for k in keys)
        if not all(math.isfinite(x) for x in (median, total, raw, loop, loop_sum, n)):
            raise ValueError(f"a timing block's account is not finite: {reply!r:.300}")
        calls = int(n)
        slack = 1e-6 * max(1.0, total + loop_sum)
        if (
            not all(x >= 0 for x in (median, total, raw, loop, loop_sum))
            or calls != self.calls[name]
            or total < (calls // 2) * median - slack
            or median < loop - slack
            or loop_floor_ms(calls, loop) > loop_sum + slack
            or (loop == 0) != (loop_sum == 0)  # a pass's time with no pass, or the reverse
            or not raw - slack <= total <= raw + calls * loop + slack
            or raw + loop_sum > BLOCK_WALL_SLACK * wall_ms + slack
        ):
            who = "candidate" if name == "candidate" else "task"
            raise _Stop(
                Status.REJECTED,
                f"{who}: a timing block's account does not add up ({calls} calls of {self.calls[name]} asked, "
                f"median {median:.4g} ms, sum {total:.4g} ms of {raw:.4g} ms measured, back-to-back "
                f"{loop:.4g} ms per call and {loop_sum:.4g} ms in all, in a block of {wall_ms:.4g} ms): a forged reply",
            )
        return median

    @staticmethod
    def _check(name: str, reply: dict) -> None:
        if not reply.get("ok"):
            who = "candidate" if name == "candidate" else "task"
            raise _Stop(Status.RUNTIME_ERROR, f"{who}: {reply.get('error', 'timing failed')}")

    def series(self, name: str) -> list[float]:
        return [getattr(r, f"{name}_ms") for r in self.rounds]


# The parent's clock against the candidate's account of its blocks (timing.unaccounted_ms): per
# timed call, the candidate's unexplained time exceeds eager's in the same round by its own
# checks (the harness snapshot, about 5% of its wall time; the per-call integrity, memory and
# spot-sample checks) and by the machine's noise: 4-50 µs per call on a quiet 2-core CPU, and up
# to 110 µs for a 33 µs call beside other work (docs/benchmarks.md, 2026-12-06). So the figure is
# reported beyond an allowance, and only an account that leaves out far more than that, and more
# than a whole claimed call, is rejected.
HIDDEN_WALL_SHARE = 0.10  # of the candidate's wall time per call
HIDDEN_EAGER_SHARE = 1.0  # of eager's unexplained time per call
HIDDEN_FLOOR_MS = 0.01
HIDDEN_REJECT = 4  # times the allowance


def hidden_per_call(rounds: list[Round]) -> tuple[list[float], list[float]]:
    """Per round, the candidate's unexplained time per call beyond eager's and the allowance for
    it; empty where the rounds carry no account."""
    excess, allowed = [], []
    for r in rounds:
        u = r.unaccounted_ms
        if r.candidate_ms is None or "candidate" not in u or "eager" not in u:
            continue
        excess.append(u["candidate"] - u["eager"])
        wall = r.candidate_ms + max(0.0, u["candidate"])
        allowed.append(HIDDEN_WALL_SHARE * wall + HIDDEN_EAGER_SHARE * max(0.0, u["eager"]) + HIDDEN_FLOOR_MS)
    return excess, allowed


def account_on_parent_clock(rounds: list[Round], findings: list[str]) -> list[str]:
    """The candidate's block medians checked against the parent's own clock: the timer runs in
    the candidate's process, where native code (or Python that got past sandbox.audit_hook) can
    rewrite its records. Unexplained time beyond the allowance is reported (a finding); beyond
    HIDDEN_REJECT allowances and more than the candidate claims for a whole call, the account
    is a lie and the result is rejected (the problems returned)."""
    per_round, allowances = hidden_per_call(rounds)
    if not per_round:
        return []
    excess, allowed = statistics.median(per_round), statistics.median(allowances)
    if excess <= allowed:
        return []
    claimed = statistics.median(_ms(r.candidate_ms) for r in rounds)
    said = (
        f"the parent's clock saw {excess * 1000:.1f} µs per timed call of the candidate that its timer did not "
        f"account for, beyond eager's in the same rounds (allowed {allowed * 1000:.1f} µs)"
    )
    # a speedup is the median of the rounds' ratios, so records rewritten to move it leave time
    # out of most rounds; other processes' work on the machine lands in some rounds: the round
    # at the lower third decides
    third = len(per_round) // 3
    beyond = sorted(e - HIDDEN_REJECT * a for e, a in zip(per_round, allowances, strict=True))[third]
    unclaimed = sorted(e - a for e, a in zip(per_round, allowances, strict=True))[third]
    if beyond > 0 and unclaimed > claimed:
        return [f"{said}, more than the {claimed * 1000:.1f} µs it claims per call: its timing records were altered"]
    findings.append(f"timing: {said}; its block medians are reported as measured")
    return []


def _speedup(baseline: str, base_ms: list[float], cand_ms: list[float], spread: float) -> Speedup:
    sp = paired_speedup(base_ms, cand_ms, spread=spread)
    verdict = verdict_of(sp["ci_low"], sp["ci_high"])
    return Speedup(
        baseline=baseline,
        ratio=sp["ratio"],
        ci_low=sp["ci_low"],
        ci_high=sp["ci_high"],
        rounds=sp["rounds"],
        verdict=verdict,
        per_round=sp["per_round"],
        worst=min(base_ms) / max(cand_ms),
    )


_LABEL = {"eager": "eager", "compile": "torch.compile"}


def speedup_words(sp: Speedup) -> str:
    """One speedup in words; an interval that holds 1.0 is never called a win."""
    interval = f"95% interval {sp.ci_low:.3g}-{sp.ci_high:.3g}x"
    label = _LABEL.get(sp.baseline, sp.baseline)
    if sp.verdict == "faster":
        return f"{sp.ratio:.3g}x faster than {label} ({interval})"
    if sp.verdict == "slower":
        return f"slower than {label}: {sp.ratio:.3g}x ({interval})"
    return f"no measurable difference from {label} ({sp.ratio:.3g}x, {interval})"


def _ms(x: float | None) -> float:
    """A round's time of a callable that ran in it (every round times every callable)."""
    if x is None:
        raise ValueError("a paired round without a time for one of its callables")
    return x


def judge_speed(rounds: list[Round], names: list[str], options: EvalOptions) -> tuple[Speed, int]:
    """The paired rounds -> the speedups with their intervals, the noise check, the verdict in
    words, and the reward of a correct candidate (sandbox.schema.milestone_reward on the
    intervals' lower ends; on a noisy window on the worst pairing of its rounds)."""
    cand = [_ms(r.candidate_ms) for r in rounds]
    eager = [_ms(r.eager_ms) for r in rounds]
    speed = Speed(rounds=len(rounds), noise_limit=options.noise_limit)
    spread = options.spread(options.resolved_backend())
    speed.vs_eager = _speedup("eager", eager, cand, spread)
    if "compile" in names:
        speed.vs_compile = _speedup("compile", [_ms(r.compile_ms) for r in rounds], cand, spread)
    speed.noise = round_noise(eager)
    speed.noisy = speed.noise > options.noise_limit
    parts = [speedup_words(x) for x in (speed.vs_eager, speed.vs_compile) if x is not None]
    speed.verdict = "; ".join(parts) + f" ({len(rounds)} paired rounds)"
    reward = milestone_reward(True, speed.vs_eager, speed.vs_compile, noisy=speed.noisy)
    if speed.noisy:
        worst = [f"{_LABEL[x.baseline]} {x.worst:.3g}x" for x in (speed.vs_eager, speed.vs_compile) if x and x.worst]
        speed.milestone = (
            f"speed milestone on the worst pairing: the machine was noisy (the eager baseline's round medians "
            f"spread {speed.noise * 100:.0f}%, limit {options.noise_limit * 100:.0f}%), so the interval is not "
            f"trusted; reward {reward} on the window's fastest baseline round over its slowest candidate round "
            f"({', '.join(worst) or 'none recorded'}) against the {SPEED_MARGIN}x margin"
        )
        speed.verdict += "; noisy machine"
    else:
        low = [f"{_LABEL[x.baseline]} {x.ci_low:.3g}" for x in (speed.vs_eager, speed.vs_compile) if x is not None]
        speed.milestone = (
            f"reward {reward}: the intervals' lower ends ({', '.join(low)}) against the {SPEED_MARGIN}x margin"
        )
    return speed, reward


def evaluate(
    task_source: str,
    files: dict[str, str],
    options: EvalOptions | None = None,
    on_progress: Progress | None = None,
    *,
    profile: bool = False,
) -> EvalResult:
    """One evaluation (docs/evaluation.md). On a GPU that other evaluations share, one that runs
    out of device memory while holding part of it (sandbox.devmem) is evaluated once more holding
    all of it: a neighbour's memory is never a reason to fail a candidate."""
    options = options or EvalOptions()
    options.validate()
    res, parts = _evaluate_once(task_source, files, options, on_progress, profile, whole=False)
    if res.status != Status.OK and parts is not None and parts < devmem.PARTS and devmem.out_of_memory(res.reasons):
        first = res.reasons[-1].splitlines()[0][:300]
        res, _ = _evaluate_once(task_source, files, options, on_progress, profile, whole=True)
        res.audit.findings.append(
            f"memory: the first attempt ran out of device memory holding {parts} of the device's {devmem.PARTS} "
            f"parts ({first}); evaluated again holding all of them"
        )
    return res


def _evaluate_once(
    task_source: str,
    files: dict[str, str],
    options: EvalOptions,
    on_progress: Progress | None,
    profile: bool,
    whole: bool,
) -> tuple[EvalResult, int | None]:
    """The evaluation and the parts of the device's memory it held (None: no share was in use;
    0: it failed before its share was sized, in the set-up)."""
    started = time.perf_counter()
    backend = options.resolved_backend()
    res = EvalResult(
        status=Status.RUNTIME_ERROR,
        verdict=Verdict.FAIL,
        backend=backend,
        torch_version=_torch_version(),
        task_hash=cache.sha256_text(task_source),
        candidate_hash=cache.files_hash(files),
        options=options.to_dict(),
    )

    current, since = "setup", started  # the step under way, for res.phases_s

    def progress(step: str, detail: dict | None = None) -> None:
        nonlocal current, since
        now = time.perf_counter()
        res.phases_s[current] = res.phases_s.get(current, 0.0) + (now - since)
        current, since = step, now
        if on_progress is not None:
            try:
                on_progress(step, detail or {})
            except Exception:
                pass

    children: list[Child] = []
    share = devmem.MemoryShare(whole=whole)
    try:
        res.containment = containment.require(backend == "cuda").label
        _run(task_source, files, options, backend, res, progress, children, profile or options.profile, share)
    except _Stop as stop:
        res.status = stop.status
        res.reasons.append(stop.reason)
        if stop.trial is not None:
            res.trials.append(stop.trial)
    except containment.Unavailable as exc:  # fail closed: nothing untrusted ran
        res.status = Status.RUNTIME_ERROR
        res.reasons.append(str(exc))
    except MALFORMED as exc:  # a reply a child forged or broke (its process writes its own socket)
        res.status = Status.RUNTIME_ERROR
        res.reasons.append(malformed_reply(exc))
    finally:
        progress("teardown", {})  # the children's exit (a CUDA context takes ~0.1 s) and folders
        if children:
            res.audit.findings.append(transport_finding(children))
        for child in children:  # both at once: a CUDA context takes ~0.1 s to tear down
            child.kill()
        if children and children[0].role == "reference" and res.timing.compile is not None:
            compile_cache.keep(children[0], res.task_hash, backend, options)
        for child in children:
            child.close()
        parts = share.parts if share.available else None
        share.release()  # after the children: their memory is the driver's again
    if res.status != Status.OK:
        res.verdict = Verdict.FAIL
        res.reward = -1
    res.duration_s = time.perf_counter() - started
    progress("done", {"status": res.status.value, "reward": res.reward})
    return res, parts


def _admitted_setup(
    ref: Child, msg: dict, share: devmem.MemoryShare, options: EvalOptions, backend: str, progress: Progress | None
) -> dict:
    """The reference's set-up under the device's memory admission, then the share of its memory
    that the measured footprint needs (all of it for `share.whole`); the cpu and evaluations
    without the device lock hold none."""
    if backend == "cuda" and options.device_lock:
        share.open(devlock.host_lock_name(backend))
    on_wait = (lambda waiting: progress("memory_wait" if waiting else "reference", {})) if progress else None
    share.admit(on_wait)
    _send(ref, msg, REF, "setup")
    data = _recv(ref, REF, "building the model")
    memory = data.get("memory") or {}
    if data.get("ok") and memory and options.device_lock:
        share.open(data.get("device_id"))
        need = devmem.footprint(memory["peak"], data["roofline"], _input_sets(data, options))
        share.take(devmem.PARTS if share.whole else devmem.parts_for(need, memory["total"]), on_wait)
    return data


def _input_sets(data: dict, options: EvalOptions) -> int:
    """The timing sets for this task: `options.input_sets`, fewer where the device the reference
    measured (its set-up reply's `memory`, cuda only) cannot hold them (devmem.input_sets_that_fit)."""
    memory = data.get("memory")
    if not memory:
        return options.input_sets
    return devmem.input_sets_that_fit(memory["peak"], data["roofline"], options.input_sets, memory["total"])


def _fewer_sets_finding(data: dict, sets: int, wanted: int) -> str:
    m, gib = data["memory"], 2**30
    return (
        f"memory: {sets} timing input sets instead of {wanted}: with {wanted}, what the evaluation "
        f"keeps on the device (sandbox.devmem.footprint, one set {data['roofline']['input_bytes'] / gib:.2f} GiB) "
        f"would pass the device's {m['total'] / gib:.0f} GiB"
    )


def _share_finding(share: devmem.MemoryShare, data: dict) -> str:
    m, gib = data["memory"], 2**30
    return (
        f"memory: {share.parts} of the device's {devmem.PARTS} parts held ({share.parts * m['total'] / devmem.PARTS / gib:.1f} GiB; "
        f"set-up peak {m['peak'] / gib:.2f} GiB, one input set {data['roofline']['input_bytes'] / gib:.2f} GiB)"
    )


def transport_finding(children: list[Child]) -> str:
    """What crossed the parent's channels in one evaluation (sandbox.channel.Traffic): the bytes
    through the sockets stay small at any tensor size; the tensors are handed on as descriptors
    of sealed memfds or (cuda) of exported device allocations."""
    total = Traffic()
    for child in children:
        total.add(child.traffic)
    return (
        f"transport: {total.messages} messages, {total.socket_bytes / 1e6:.2f} MB through the sockets, "
        f"{total.shared_bytes / 1e6:.1f} MB in sealed memfds and {total.device_bytes / 1e6:.1f} MB in device "
        f"allocations handed on as {total.descriptors} descriptors"
    )


def _run(
    task_source: str,
    files: dict[str, str],
    options: EvalOptions,
    backend: str,
    res: EvalResult,
    progress: Progress,
    children: list[Child],
    want_profile: bool,
    share: devmem.MemoryShare,
) -> None:
    """The steps of docs/evaluation.md in order (`_Evaluation`): a step that settles the result
    returns False (or raises _Stop) and the rest do not run."""
    ev = _Evaluation(task_source, files, options, backend, res, progress, children, share)
    steps = (ev.scan, ev.compile, ev.start, ev.reference, ev.candidate_import, ev.correctness, ev.timing, ev.verdict)
    for step in steps:
        if step() is False:
            return
    ev.roofline_and_profile(want_profile)


class _Evaluation:
    """One evaluation's state between its steps: the build, both children, the reference's
    set-up, the trials' report and the paired window."""

    def __init__(
        self,
        task_source: str,
        files: dict[str, str],
        options: EvalOptions,
        backend: str,
        res: EvalResult,
        progress: Progress,
        children: list[Child],
        share: devmem.MemoryShare,
    ):
        self.task_source, self.files, self.options, self.backend = task_source, files, options, backend
        self.res, self.progress, self.children = res, progress, children
        self.share = share  # this evaluation's part of the device's memory, released by evaluate
        self.fp_seed = secrets.randbits(62)
        self.widen = 1.0  # the timed-call fingerprint bounds, in tolerance units (wider after a float64 pass)

    def compile(self) -> bool:
        """2. Build the candidate's sources (cached by content) and scan what the build imports."""
        res = self.res
        self.progress("compiling", {})
        cres, self.artifacts = build(self.files, self.options)
        res.compile = cres
        if not cres.ok:
            res.status = Status.COMPILE_ERROR
            res.reasons.extend(
                f"{e.file}{':' + str(e.line) if e.line else ''}{':' + str(e.column) if e.column else ''}: {e.message}"
                for e in cres.errors[:20]
            )
            if not cres.errors:
                res.reasons.append("compilation failed; see compile.log")
            return False
        linked = audit.scan_libraries(self.artifacts, self.options.torch_ops)  # what the built libraries import
        res.audit.findings.extend(f"static: {f}" for f in linked)
        if linked and REJECT_STATIC:
            raise _Stop(
                Status.REJECTED, "the candidate's build calls what the evaluation cannot see: " + "; ".join(linked[:5])
            )
        return True

    def scan(self) -> None:
        """1. The static scan: findings always; a technique that can subvert the evaluation stops it."""
        findings, blocking = static_scan(self.files, self.options.torch_ops)
        self.res.audit.findings.extend(f"static: {f}" for f in findings)
        if blocking:
            raise _Stop(Status.REJECTED, static_rejection(blocking))

    def start(self) -> None:
        """3. Both children at once (they import torch in parallel) and their files; the
        candidate's set-up message waits for the memory admission (`reference`)."""
        options, backend, res = self.options, self.backend, self.res
        self.progress("starting", {})
        limits = _limits(options, backend)
        env = _child_env(options, backend)
        self.ref = ref = start_child("reference", limits, options, env)
        self.children.append(ref)
        self.cand = cand = start_child("candidate", limits, options, env)
        self.children.append(cand)
        res.audit.findings.append(f"isolation: {cand.isolation.describe()}")
        ref.write_files({"task.py": self.task_source}, subdir=".")
        compile_cache.seed(ref, res.task_hash, backend, options)
        try:
            cand.write_files(self.files)
        except (OSError, ValueError) as exc:  # past build's checks: a clear result all the same, never a raise
            raise _Stop(Status.COMPILE_ERROR, f"the candidate's files could not be set up: {exc}") from exc
        cand_setup = _candidate_artifacts(cand, self.artifacts)
        self.cand_setup = {"options": _opts_msg(options), "backend": backend, "refuse": RUN_TIME_REFUSALS, **cand_setup}

    def reference(self) -> None:
        """4. The reference builds its model under the memory admission and replies with its base
        weights; then the candidate gets its set-up (memory before the device)."""
        options = self.options
        self.progress("reference", {})
        preset = PRESETS[options.preset]
        msg = {
            "options": _opts_msg(options),
            "backend": self.backend,
            "seeds": _seeds(options),
            "fingerprint_seed": self.fp_seed,
            "reinit": preset["reinit_trial"],
            "wide": preset["wide_trial"],
            "shape": preset["shape_trial"],
        }
        self.data = data = _admitted_setup(self.ref, msg, self.share, options, self.backend, self.progress)
        if not data.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, _user_error(data, "task"))
        # only now: the set-up holds the device shared until the candidate's import reply, and an
        # evaluation that waited for memory while its child held the device would deadlock with
        # one that holds memory and waits for the device exclusively (six shards, 2026-12-07)
        _send(self.cand, self.cand_setup, "the candidate", "setup")
        if self.share.parts:
            self.res.audit.findings.append(_share_finding(self.share, data))
        self.res.device = data["device_name"]
        self.res.device_id = data.get("device_id", "")

    def candidate_import(self) -> None:
        """5. The candidate reports its import and its base model."""
        self.progress("import", {})
        _send(self.cand, {"variants": self.data["variants"]}, "the candidate", "setup")
        ready = _recv(self.cand, "the candidate", "import")
        if not ready.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, _user_error(ready, "candidate"))

    def correctness(self) -> bool:
        """6-7. The correctness trials, one at a time (the candidate's wall-time limit starts now,
        not while it waited), judged, then the audit."""
        res, data = self.res, self.data
        self.cand.restart_clock()
        self.progress("correctness", {"trial": 0, "of": data["planned"]})
        roof = data["roofline"]
        ahead = roof["input_bytes"] + roof["output_bytes"] <= PIPELINE_MAX_BYTES
        trials, self.msg = _run_trials(
            self.ref,
            self.cand,
            lambda i: self.progress("correctness", {"trial": i, "of": max(i, data["planned"])}),
            ahead,
        )
        res.audit.findings.extend(f"protocol: {n}" for n in self.msg["notes"])
        self.progress("judging", {})
        rejections, incorrect, values_only = _judge_trials(self.msg, trials, self.options, res)
        if values_only and not rejections:
            incorrect, self.widen = _rejudge_against_float64(trials, values_only, res, incorrect)
        _judge_audit(self.msg, self.options, self.backend, res, rejections)
        if rejections or incorrect:
            res.status = Status.REJECTED if rejections else Status.INCORRECT
            res.reasons.extend(rejections + incorrect)
            return False
        return True

    def timing(self) -> bool:
        """8. The timing sets (kept on the device by both children), then the baselines (the
        reference builds torch.compile, whose first call compiles: CPU work, untimed) while the
        candidate prepares its side; then one window, eager / torch.compile / candidate in rounds."""
        options, backend, res, ref, cand = self.options, self.backend, self.res, self.ref, self.cand
        self.progress("baseline", {"compile": options.compile_baseline})
        sets = _input_sets(self.data, options)
        if sets < options.input_sets:
            res.audit.findings.append(_fewer_sets_finding(self.data, sets, options.input_sets))
        fingerprints, shapes, returned = _timing_sets(ref, cand, sets)
        ref.restart_clock(options.eval_timeout_s + (options.compile_timeout_s if options.compile_baseline else 0))
        window = _window_cpu(options, backend, res.device_id)
        _send(
            ref,
            {"cmd": "timing_setup", "compile": options.compile_baseline, "fingerprint_seed": self.fp_seed, **window},
            REF,
            "baseline set-up",
        )
        _send(
            cand,
            {
                "cmd": "timing_setup",
                "shapes": shapes,
                "passthrough": returned,
                "fingerprint_seed": self.fp_seed,
                **window,
            },
            "the candidate",
            "timing",
        )
        ready = _recv(cand, "the candidate", "the timing set-up")
        if not ready.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, "candidate: " + ready.get("error", "timing set-up failed"))
        names = list(_baseline_ready(ref, res)["callables"])
        self.progress("timing", {"budget_s": options.timing_budget_s, "rounds": options.timing_rounds})
        self.paired = paired = _Paired(ref, cand, [*names, "candidate"], options, res.device_id)
        try:
            paired.run(self.progress)
        finally:
            res.audit.findings.extend(paired.findings)
        hidden = account_on_parent_clock(paired.rounds, res.audit.findings)
        _send(cand, {"cmd": "timing_end"}, "the candidate", "timing")
        timed = _recv(cand, "the candidate", "timing")
        if not timed.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, "candidate: " + timed.get("error", "timing failed"))
        _send(ref, {"cmd": "timing_end"}, REF, "baseline timing")
        base = _recv(ref, REF, "baseline timing")
        problems = _judge_timing(timed, fingerprints, self.msg, options, backend, res, self.files, self.widen)
        problems += hidden
        problems += _spot_checks(ref, timed.get("spot") or [])
        _record_timing(res, paired, timed, base, backend, sets)
        res.audit.kernels = sorted(set(res.audit.kernels) | set(timed.get("kernels", [])))
        res.audit.graph_launches = int(timed.get("graph_launches", 0))
        if problems:
            res.status = Status.REJECTED
            res.reasons.extend(problems)
            return False
        return True

    def verdict(self) -> None:
        """The pass, the paired speedups and the milestone reward (judge_speed)."""
        res = self.res
        res.status = Status.OK
        res.verdict = Verdict.PASS
        res.speed, res.reward = judge_speed(self.paired.rounds, self.paired.names, self.options)
        res.speedup_vs_eager = res.speed.vs_eager.ratio if res.speed.vs_eager else None
        res.speedup_vs_compile = res.speed.vs_compile.ratio if res.speed.vs_compile else None
        res.reasons.append(_summary(res))
        if res.speed.noisy:
            res.reasons.append(res.speed.milestone)

    def roofline_and_profile(self, want_profile: bool) -> None:
        """9. The roofline, and on request the candidate's per-kernel profile."""
        res = self.res
        self.progress("roofline", {})
        res.roofline = _roofline(self.ref, self.data, res, self.options)
        if not want_profile:
            return
        self.progress("profile", {})
        _send(self.cand, {"cmd": "profile", "calls": 5}, "the candidate", "profiling")
        prof = _recv(self.cand, "the candidate", "profiling")
        if prof.get("ok"):
            total = sum(r["total_ms"] for r in prof["rows"]) or 1.0
            rows = sorted(prof["rows"], key=lambda r: -r["total_ms"])
            res.profile = [
                ProfileRow(name=r["name"], calls=r["calls"], total_ms=r["total_ms"], share=r["total_ms"] / total)
                for r in rows[:40]
            ]
        else:
            res.audit.findings.append(prof.get("error", "profiling failed"))


def _candidate_artifacts(cand: Child, artifacts: Artifacts) -> dict:
    setup: dict[str, Any] = {"library": None, "inline_manifest": [], "inline_dir": None}
    if artifacts.library:
        setup["library"] = str(cand.copy_in(artifacts.library, "lib/kernels.so"))
    if artifacts.inline_dir and artifacts.inline_manifest:
        for entry in artifacts.inline_manifest:
            cand.copy_in(f"{artifacts.inline_dir}/{entry['file']}", f"inline/{entry['file']}")
        setup["inline_manifest"] = artifacts.inline_manifest
        setup["inline_dir"] = cand.inside(cand.workdir / "inline")
    return setup


REF = "the reference (task)"


# Trials up to this many bytes (inputs + outputs) overlap: the reference draws trial i + 1 and
# compares trial i - 1 while the candidate runs trial i (three trials alive in the reference).
# Larger ones run one at a time, so a task needs about one trial's memory.
PIPELINE_MAX_BYTES = 256 << 20


def _run_trials(ref: Child, cand: Child, progress: Callable[[int], None], ahead: bool) -> tuple[list[dict], dict]:
    """The correctness trials: the reference draws a trial (its expected outputs stay in the
    reference), the candidate runs it on the reference's inputs (descriptors of the reference's
    sealed memfd, forwarded unread), and the reference compares the candidate's outputs
    (descriptors of the candidate's sealed memfd) with its own. Only descriptors, specs, the
    candidate's checks and the comparison's summary pass through here. `ahead`: the reference's
    work on the neighbouring trials overlaps the candidate's run. Returns the trials (kind, note,
    checks, comparison) and the candidate's closing report (ops, custom-kernel calls, findings)
    with the reference's notes."""
    trials: list[dict] = []
    notes: list[str] = []

    def drawn() -> dict | None:
        t = _recv(ref, REF, "computing expected outputs")
        if not t.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, _user_error(t, "task"))
        if t.get("done"):
            notes.extend(t["notes"])
            return None
        return t

    def ask_compare(i: int, got: dict) -> None:
        clean = not any(kind in ("reject", "incorrect") for kind, _ in got["checks"])
        _send(
            ref,
            {"cmd": "compare", "index": i, "spec": got["spec"], "outputs": got.pop("outputs"), "clean": clean},
            REF,
            "the comparison",
        )

    def compared(i: int) -> None:
        cmp = _recv(ref, REF, "the comparison")
        if not cmp.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, _user_error(cmp, "task"))
        trials[i]["cmp"] = cmp

    _send(ref, {"cmd": "trial"}, REF, "the trials")
    t = drawn()
    waiting: tuple[int, dict] | None = None  # a trial the candidate ran whose comparison is still to ask for
    while t is not None or waiting is not None:
        i = len(trials)
        if t is not None:
            progress(i + 1)
            _send(
                cand,
                {
                    "cmd": "trial",
                    "index": i,
                    "variant": t["variant"],
                    "variant_spec": t["variant_spec"],
                    "passthrough": t.get("passthrough"),
                    "inputs": t.pop("inputs"),
                },
                "the candidate",
                "the correctness trials",
            )
            trials.append(
                {"kind": t["kind"], "note": t.get("note", ""), "checks": [], "output_bytes": t["output_bytes"]}
            )
            if ahead:
                _send(ref, {"cmd": "trial"}, REF, "the trials")
        if waiting is not None:
            ask_compare(*waiting)
        nxt = drawn() if t is not None and ahead else None
        if waiting is not None:
            compared(waiting[0])
            waiting = None
        if t is not None:
            got = _recv(cand, "the candidate", "the correctness trials")
            if got.get("ok") is False:
                raise _Stop(
                    Status.RUNTIME_ERROR,
                    _user_error(got, "candidate"),
                    trial=TrialResult(index=i, kind=t["kind"], passed=False, message=got.get("error", "")[:2000]),
                )
            trials[i]["checks"] = got["checks"]
            _bound_outputs(got, trials[i]["output_bytes"])
            waiting = (i, got)
            if not ahead:
                ask_compare(*waiting)
                compared(i)
                waiting = None
                _send(ref, {"cmd": "trial"}, REF, "the trials")
                nxt = drawn()
        t = nxt
    _send(cand, {"cmd": "trials_end"}, "the candidate", "the correctness trials")
    msg = _recv(cand, "the candidate", "the correctness trials")
    msg["notes"] = notes
    return trials, msg


def _bound_outputs(got: dict, expected_bytes: int) -> None:
    """Outputs holding more bytes than the reference's are wrong whatever they hold; they are not
    passed on (the reference would map what they announce, so a candidate could make it
    populate terabytes), and the trial fails on their structure."""
    from .channel import HANDLES

    held = sum(x.nbytes for x in got["outputs"] if isinstance(x, HANDLES))
    if held > expected_bytes:
        got["checks"].append(("incorrect", f"the outputs hold {held} bytes, the reference's {expected_bytes}"))
        got["outputs"] = [None] * len(got["outputs"])


def _timing_sets(ref: Child, cand: Child | None, n: int) -> tuple[list, list, list]:
    """`n` timing input sets, one at a time: the reference draws one and keeps it on its device,
    the candidate copies it to its device (cpu: keeps the read-only map). Returns the expected
    outputs' fingerprints (value, allowed deviation) per set, the outputs' shapes and which
    outputs are inputs returned as they are (harness.passthrough)."""
    prints: list = []
    shapes: list = []
    returned: list = []
    for _ in range(n):
        _send(ref, {"cmd": "timing_set"}, REF, "the timing sets")
        got = _recv(ref, REF, "the timing sets")
        if not got.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, _user_error(got, "task"))
        prints.append(got["fingerprint"])
        shapes, returned = got["shapes"], got.get("passthrough") or []
        if cand is not None:
            _send(cand, {"cmd": "timing_set", "inputs": got.pop("inputs")}, "the candidate", "the timing sets")
            if not _recv(cand, "the candidate", "the timing sets").get("ok"):
                raise _Stop(Status.RUNTIME_ERROR, "candidate: the timing sets could not be set up")
    return prints, shapes, returned


def _baseline_ready(ref: Child, res: EvalResult) -> dict:
    """The reference's reply to its timing set-up (torch.compile built, or why not)."""
    ready = _recv(ref, REF, "the baseline set-up (torch.compile)")
    if not ready.get("ok"):
        raise _Stop(Status.RUNTIME_ERROR, "task: " + ready.get("error", "baseline set-up failed"))
    if ready.get("compile_error"):
        res.audit.findings.append(ready["compile_error"])
    return ready


def _judge_trials(
    msg: dict, trials: list[dict], options: EvalOptions, res: EvalResult
) -> tuple[list[str], list[str], list[int]]:
    """(rejections, incorrect, values_only) from the reference's comparisons and the candidate's
    checks: the last lists the failing trials when every failure is a value-only mismatch of a
    returned result (else it is empty)."""
    rejections: list[str] = []
    incorrect: list[str] = []
    values_only: list[int] = []
    other_failure = False
    for i, trial in enumerate(trials):
        cmp, checks = trial["cmp"], trial["checks"]
        problems = [text for kind, text in checks if kind == "incorrect"]
        rejects = [text for kind, text in checks if kind == "reject"]
        passed = cmp["passed"] and not problems and not rejects
        message = "; ".join(x for x in [cmp["message"], *problems, *rejects] if x)
        kind = trial["kind"] + (f" ({trial['note']})" if trial.get("note") else "")
        res.trials.append(
            TrialResult(
                index=i,
                kind=trial["kind"],
                passed=passed,
                max_abs_error=cmp["max_abs_error"],
                max_rel_error=cmp["max_rel_error"],
                mismatched=cmp["mismatched"],
                total=cmp["total"],
                message=(f"[{kind}] " if trial.get("note") else "") + message,
            )
        )
        for text in rejects:
            if text not in rejections:
                rejections.append(text)
        if not cmp["passed"] or problems:
            incorrect.append(f"trial {i + 1} ({kind}): {message}")
            if cmp["values_only"] and not problems and not rejects:
                values_only.append(i)
            else:
                other_failure = True
    return rejections, incorrect, [] if other_failure else values_only


def _rejudge_against_float64(
    trials: list[dict], failing: list[int], res: EvalResult, incorrect: list[str]
) -> tuple[list[str], float]:
    """The `failing` trials (value-only mismatches, and the only failures) get a second look
    against the task in float64 (compare.within_reference_error, run in the reference child when
    it compared them); the verdict changes only if every one of them passes that way. Returns
    (incorrect, fingerprint widening in units)."""
    verdicts = []
    for i in failing:
        exact = trials[i]["cmp"].get("exact") or {"ok": False, "float64": True}
        if exact.get("float64"):
            return incorrect, 1.0  # already float64: nothing more exact to compare with
        if "error" in exact:
            res.audit.findings.append(f"protocol: float64 recomputation unavailable ({exact['error'][:200]})")
            return incorrect, 1.0
        verdicts.append((i, exact["ok"], exact["text"], exact["units"]))
    if not all(v[1] for v in verdicts):
        return incorrect + [f"trial {i + 1}, against float64: {text}" for i, ok, text, _ in verdicts if not ok], 1.0
    for i, _, text, _ in verdicts:
        res.trials[i].passed = True
        res.trials[i].message = f"outside the tolerance of the float32 reference, but {text}"
    res.audit.findings.append(
        f"protocol: {len(verdicts)} trial(s) passed against the float64 result (more exact than the float32 reference)"
    )
    return [], max(v[3] for v in verdicts)


def _judge_audit(msg: dict, options: EvalOptions, backend: str, res: EvalResult, rejections: list[str]) -> None:
    ops = msg["ops"]
    res.audit.aten_ops = sorted(ops)
    compute = sorted(op for op in ops if audit.classify(op) == "compute")
    res.audit.torch_compute_ops = compute
    custom_ops = sorted(op for op in ops if audit.classify(op) == "custom")
    calls = {k: v for k, v in msg["custom_calls"].items() if v}
    res.audit.kernels = sorted([f"{name} x{n}" for name, n in calls.items()] + custom_ops)
    per_forward = msg.get("calls_per_forward") or []
    res.audit.custom_kernel_ran = bool(per_forward) and all(n > 0 for n in per_forward) or bool(custom_ops)
    for kind, text in msg["findings"]:
        res.audit.findings.append(f"{kind}: {text}")
        if kind in ("tamper", "flags", "thread"):
            rejections.append(text)
    if options.torch_ops == "forbid":
        if compute:
            rejections.append(
                "torch-ops=forbid: the forward computed with torch operators "
                + ", ".join(compute)
                + _fallback_trials(res.trials, per_forward)
                + " (allowed: allocation, views, library GEMM/convolution; write these as kernels)"
            )
        if not res.audit.custom_kernel_ran:
            if per_forward and any(n == 0 for n in per_forward) and any(n > 0 for n in per_forward):
                rejections.append(
                    "torch-ops=forbid: custom kernels ran in only some trials (a fallback path computed the others)"
                )
            else:
                rejections.append(
                    "torch-ops=forbid: no custom kernel ran in the forward (call your kernels through kwrt or the load_inline module)"
                )


def _fallback_trials(trials: list[TrialResult], per_forward: list[int]) -> str:
    """Where the candidate's kernels ran in some trials and in others none did, the others (a
    guard that sends inputs it was not made for to the reference's forward, the shape trial's
    usually): said in the rejection, since the operators were computed there."""
    if len(per_forward) != len(trials) or all(n == 0 for n in per_forward) or all(n > 0 for n in per_forward):
        return ""
    names = [f"{t.index + 1} ({t.kind})" for t, n in zip(trials, per_forward, strict=True) if n == 0]
    return (
        f" in trial {', '.join(names)}, where none of the candidate's kernels ran (a fallback path, such as a "
        "guard that sends sizes the candidate was not made for to the reference's forward)"
    )


def replayed_calls(prints: list[tuple[int, float]], bounds: list) -> int:
    """Timed calls whose output repeats, bit for bit, the output of a call on another input set
    whose expected output differs. A replayed output can pass the bound check where the sets'
    expected outputs lie within the tolerance of each other (a softmax of 16k near-equal values),
    but an honest output of other inputs never has the same projection to the last bit. A set
    without a bound (its reference output is not finite) has no expected value to tell apart, so
    it is left to the correctness trials here as in the bound check."""
    first: dict[float, int] = {}
    replayed = 0
    for k, value in prints:
        j = first.setdefault(value, k)
        bj = bounds[j] if 0 <= j < len(bounds) else None
        bk = bounds[k] if 0 <= k < len(bounds) else None
        if j != k and bj is not None and bk is not None and bj[0] != bk[0]:
            replayed += 1
    return replayed


def _spot_checks(ref: Any, spots: list[dict]) -> list[str]:
    """Timed outputs the candidate's harness kept at random (timed_checks.SpotSample), each
    compared in full by the reference as a trial's: the timed calls are held to the trials'
    rules, not only to their fingerprints' bound."""
    for n, spot in enumerate(spots, 1):
        _send(
            ref,
            {"cmd": "spot_compare", "set": spot["set"], "spec": spot["spec"], "outputs": spot["outputs"]},
            REF,
            "a spot check",
        )
        got = _recv(ref, REF, "a spot check")
        if not got.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, "reference: " + got.get("error", "the spot check failed"))
        if not got["passed"] and not (got.get("exact") or {}).get("ok"):
            return [
                f"a timed call's output, kept at random and compared in full ({n} of {len(spots)}), was wrong: "
                f"{got['message']} (timed calls are held to the trials' rules)"
            ]
    return []


def _judge_timing(
    timed: dict,
    bounds: list,
    trial_msg: dict,
    options: EvalOptions,
    backend: str,
    res: EvalResult,
    files: dict[str, str],
    widen: float = 1.0,
) -> list[str]:
    """Fingerprints of every timed call against the reference's (computed in the reference
    child on the same kind of device, from the same weights), custom-kernel counts, flags."""
    problems: list[str] = []
    wrong = 0
    for k, value in timed["fingerprints"]:
        b = bounds[k] if 0 <= k < len(bounds) else None
        if b is None:
            continue
        expected, allowed = b
        if not (abs(value - expected) <= allowed * widen):
            wrong += 1
    wrong += replayed_calls(timed["fingerprints"], bounds)
    if timed.get("foreign_outputs"):
        problems.append(f"{timed['foreign_outputs']} timed outputs were {FOREIGN_WHY}")
    if timed.get("fault_handler_reads"):
        problems.append(f"{timed['fault_handler_reads']} timed calls: {FAULT_HANDLER_WHY}")
    if timed.get("attached_outputs"):
        problems.append(
            f"{timed['attached_outputs']} timed outputs carried a weak reference or attributes (work attached to "
            "their release runs outside the timed call): outputs must be plain fresh tensors"
        )
    if timed.get("held_repeats"):
        problems.append(
            f"{timed['held_repeats']} timed calls returned memory that an earlier call's output still held "
            "(an output returned again, not computed: outputs must be fresh tensors)"
        )
    if wrong:
        problems.append(
            f"{wrong} of {len(timed['fingerprints'])} timed calls returned wrong outputs (outputs are checked on every timed call: caching, replaying or skipping work is not allowed)"
        )
    per_forward = trial_msg.get("calls_per_forward") or []
    if options.torch_ops == "forbid" and per_forward:
        expected_calls = min(per_forward) * timed["forwards"]
        if timed["custom_calls"] < expected_calls:
            problems.append(
                f"custom kernels ran {timed['custom_calls']} times in {timed['forwards']} timed forwards, expected at least {expected_calls} (the kernels must run in every timed call)"
            )
    if backend == "cuda" and options.torch_ops == "forbid":
        names = timed.get("kernels", [])
        custom = [n for n in names if _is_custom_cuda_kernel(n)]
        if not custom:
            problems.append(
                "no custom CUDA kernel was launched by the forward (profiler saw only: " + ", ".join(names[:8]) + ")"
            )
        foreign = []
        if timed.get("graph_launches"):  # the candidate's own kernels: the __global__ names in its sources
            own = audit.kernel_names(files)
            foreign = [n for n in names if not _may_run_in_a_graph(n, own)]
        if foreign:
            problems.append(
                "the forward replayed a CUDA graph, and kernels that are neither the candidate's own (a "
                "__global__ function in its sources) nor cuBLAS/cuDNN ran in it; inside a CUDA graph the op "
                "audit cannot see which torch operator launched them: " + ", ".join(foreign[:3])
            )
    for kind, text in timed.get("findings", []):
        res.audit.findings.append(f"{kind} (timing): {text}")
        if kind in ("tamper", "flags", "thread"):
            problems.append(f"during timing: {text}")
    return problems


# Kernel names, by what launched them. torch's own (ATen, c10, CUB through ATen, Inductor's Triton,
# and kernels in no namespace: the warp softmax, THCUNN's): never a candidate's.
_TORCH_KERNEL = re.compile(r"(?<![\w:])(?:at|c10|torch|at_cuda_detail)::|\b(?:triton_|softmax_warp_|cunn_)")
# Libraries torch-ops=forbid allows (cuBLAS/cuBLASLt, cuDNN and their helpers), copies and fills.
_ALLOWED_LIBRARY_KERNEL_HINTS = (
    "cublas",
    "cutlass",
    "xmma",
    "nvjet",
    "gemm",
    "gemv",
    "splitKreduce",
    "cudnn",
    "cask_",
    "nchwToNhwc",
    "nhwcToNchw",
    "convolve_",
    "memcpy",
    "memset",
)
_OTHER_LIBRARY_KERNEL_HINTS = ("fft",)  # libraries that are not custom work, nor allowed under forbid


def _is_allowed_library_kernel(name: str) -> bool:
    low = name.lower()
    return any(h.lower() in low for h in _ALLOWED_LIBRARY_KERNEL_HINTS)


def _is_custom_cuda_kernel(name: str) -> bool:
    return not (
        _TORCH_KERNEL.search(name)
        or _is_allowed_library_kernel(name)
        or any(h in name.lower() for h in _OTHER_LIBRARY_KERNEL_HINTS)
    )


def _kernel_base(name: str) -> str:
    """'void ns::fused_0_kernel<4>(float*)' -> 'ns::fused_0_kernel'."""
    head = name[5:] if name.startswith("void ") else name
    for stop in "<(":
        head = head.split(stop, 1)[0]
    return head.strip()


def _may_run_in_a_graph(name: str, own: set[str]) -> bool:
    """A kernel that may run in a forward that replays a CUDA graph (torch-ops=forbid): one of the
    candidate's own (its __global__ functions, outside torch's namespaces), an allowed library's,
    or a fill (allocation ops launch those). By name, so an allowlist: torch's kernels have no
    single namespace (its warp softmax, `softmax_warp_forward`, has none)."""
    if _TORCH_KERNEL.search(name):
        return "FillFunctor" in name
    return _is_allowed_library_kernel(name) or _kernel_base(name).split("::")[-1] in own


CEILING_RANGES = {"bandwidth_gbs": (1e-3, 1e6), "tflops": (1e-6, 1e5)}  # what any device can measure


def _roofline(ref: Child, data: dict, res: EvalResult, options: EvalOptions) -> Roofline | None:
    """The roofline, a report only: whatever goes wrong in it is a finding, never the result's
    status. The ceilings are measured in the reference child, which runs the task's code, so
    they are cached per task (a hostile task cannot write another's: red team 2026-12-06
    poisoned a host-wide entry) and held to CEILING_RANGES; a measurement that fails or times
    out is remembered too, so a task that stalls it holds the device once."""
    try:
        roof = data.get("roofline") or {}
        if not roof or res.timing.candidate is None:
            return None
        dtype = str((roof.get("dtypes") or ["float32"])[0])
        key = cache.sha256_text(
            "ceilings/2",
            res.task_hash,
            res.device,
            _torch_version(),
            dtype,
            str(options.threads()),
            str(options.allow_tf32),
        )
        path = cache.section(options.cache_dir, "ceilings") / f"{key}.json"
        ceil = cache.read_json(path)
        if ceil is None:
            ceil = _measure_ceilings(ref, dtype)
            cache.write_json_atomic(path, ceil)
        if ceil.get("failed"):
            res.audit.findings.append(f"roofline: could not measure the device ceilings ({ceil['failed']})")
            return None
        flops, nbytes = float(roof["flops"]), float(roof["min_bytes"])
        if not (math.isfinite(flops) and math.isfinite(nbytes)):
            raise ValueError("the task's FLOP or byte count is not finite")
        return roofline_of(
            res.device, flops, nbytes, ceil["bandwidth_gbs"], ceil["tflops"], res.timing.candidate.median_ms
        )
    except Exception as exc:
        res.audit.findings.append(f"roofline: not computed ({type(exc).__name__}: {str(exc)[:200]})")
        return None


def _measure_ceilings(ref: Child, dtype: str) -> dict:
    """The device's bandwidth and FLOP rate from the reference child, checked, or {"failed": why}."""
    try:
        ref.restart_clock(180)
        ref.send({"cmd": "ceilings", "dtype": dtype})
        reply = ref.recv(timeout=120)
        ceil = {k: float(reply[k]) for k in CEILING_RANGES}
    except Exception as exc:
        return {"failed": type(exc).__name__}
    for k, (lo, hi) in CEILING_RANGES.items():
        if not lo <= ceil[k] <= hi:  # NaN fails too
            return {"failed": f"{k} {ceil[k]!r} is not a device's"}
    return ceil


def roofline_of(device: str, flops: float, nbytes: float, bw_gbs: float, tflops: float, cand_ms: float) -> Roofline:
    """The floor is max(FLOPs / peak, bytes / bandwidth) of the task as written. A candidate
    faster than the FLOP floor computes fewer FLOPs than the reference (an algebraic rewrite:
    diag(d) @ X as a row scaling); the FLOP count no longer bounds it, the bytes still do, so
    it is measured against the memory floor, and the result says so."""
    t_mem = nbytes / (bw_gbs * 1e9) * 1e3 if bw_gbs else 0.0
    t_cmp = flops / (tflops * 1e12) * 1e3 if tflops else 0.0
    floor, bound, note = max(t_mem, t_cmp), "compute" if t_cmp > t_mem else "memory", ""
    if bound == "compute" and 0 < cand_ms < floor:
        note = (
            f"faster than the task's FLOP floor ({t_cmp:.4g} ms for {flops:.3g} FLOP as written): the candidate "
            "computes fewer FLOPs than the reference, so it is measured against the memory floor"
        )
        floor, bound = t_mem, "memory"
    if 0 < cand_ms < floor:
        note = (
            note + "; " if note else ""
        ) + "faster than the memory floor: it moves fewer bytes than the inputs, outputs and parameters"
    return Roofline(
        device=device,
        flops=flops,
        min_bytes=nbytes,
        peak_bandwidth_gbs=bw_gbs,
        peak_tflops=tflops,
        floor_ms=floor,
        bound=bound,
        candidate_ms=cand_ms,
        fraction_of_sol=min(1.0, floor / cand_ms) if cand_ms > 0 else None,
        note=note,
    )


def _record_timing(
    res: EvalResult, paired: _Paired, timed: dict | None, base: dict, backend: str, input_sets: int
) -> None:
    """The window's stats per callable (over all its blocks), its rounds and its window. The
    window is recorded once, on the candidate's stats (or eager's without a candidate): the
    three callables share it, and devlock.overlapping_windows looks for overlaps between
    evaluations, not inside one."""
    stats = dict(base.get("stats") or {})
    if timed is not None:
        stats["candidate"] = timed["stats"]
    t = res.timing
    t.mode = "paired" if timed is not None else "alone"
    for name in ("candidate", "eager", "compile"):
        setattr(t, name, Stats(**stats[name]) if name in stats and name in paired.names else None)
    t.rounds = list(paired.rounds)
    t.calls_per_block = dict(paired.calls)
    t.window = paired.window
    owner = t.candidate or t.eager
    if owner is not None:
        owner.window = paired.window
    t.clock = "cuda_events" if backend == "cuda" else "perf_counter"
    t.l2_flush = backend == "cuda"
    t.input_sets = input_sets


def _summary(res: EvalResult) -> str:
    c = res.timing.candidate
    assert c is not None, "a passing result has the candidate's timing"
    parts = [f"correct in {len(res.trials)} trials; candidate median {c.median_ms:.4g} ms"]
    if res.timing.eager:
        parts.append(f"eager {res.timing.eager.median_ms:.4g} ms")
    if res.timing.compile:
        parts.append(f"torch.compile {res.timing.compile.median_ms:.4g} ms")
    if res.speed is not None:
        parts.append(res.speed.verdict)
    if c.loop_ms and c.device_median_ms and c.loop_ms > c.device_median_ms:
        parts.append(
            f"host-bound: called back to back it takes {c.loop_ms:.4g} ms per call against {c.device_median_ms:.4g} ms "
            f"of device time, so the forward's Python, allocations and launches ({c.host_median_ms or 0:.4g} ms) set its "
            "time (fewer launches or less Python per call would help)"
        )
    return ", ".join(parts)


def baseline(task_source: str, options: EvalOptions | None = None) -> EvalResult:
    """Times the task alone (eager and torch.compile, in rounds as an evaluation times them, timing
    mode "alone") with the full reference setup: the same result shape as an evaluation, with no
    candidate and no speedup (status ok, reward -1: there is nothing to reward)."""
    options = options or EvalOptions()
    options.validate()
    started = time.perf_counter()
    backend = options.resolved_backend()
    res = EvalResult(
        status=Status.RUNTIME_ERROR,
        verdict=Verdict.FAIL,
        backend=backend,
        torch_version=_torch_version(),
        task_hash=cache.sha256_text(task_source),
        options=options.to_dict(),
    )
    ref = None
    share = devmem.MemoryShare()
    try:
        ref = Child("reference", _limits(options, backend), options, _child_env(options, backend))
        ref.write_files({"task.py": task_source}, subdir=".")
        msg = {
            "options": _opts_msg(options),
            "backend": backend,
            "seeds": _seeds(options),
            "fingerprint_seed": 1,
            "reinit": False,
            "wide": False,
            "shape": False,
        }
        data = _admitted_setup(ref, msg, share, options, backend, None)
        if not data.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, _user_error(data, "task"))
        res.device = data["device_name"]
        res.device_id = data.get("device_id", "")
        sets = _input_sets(data, options)
        _timing_sets(ref, None, sets)
        ref.restart_clock(options.eval_timeout_s + (options.compile_timeout_s if options.compile_baseline else 0))
        _send(
            ref,
            {
                "cmd": "timing_setup",
                "compile": options.compile_baseline,
                "fingerprint_seed": 1,
                **_window_cpu(options, backend, res.device_id),
            },
            "the reference (task)",
            "baseline set-up",
        )
        ready = _recv(ref, "the reference (task)", "the baseline set-up (torch.compile)")
        if not ready.get("ok"):
            raise _Stop(Status.RUNTIME_ERROR, "task: " + ready.get("error", "baseline set-up failed"))
        if ready.get("compile_error"):
            res.reasons.append(ready["compile_error"])
        paired = _Paired(ref, None, list(ready["callables"]), options, res.device_id)
        paired.run()
        res.reasons.extend(paired.findings)
        _send(ref, {"cmd": "timing_end"}, "the reference (task)", "baseline timing")
        _record_timing(res, paired, None, _recv(ref, "the reference (task)", "baseline timing"), backend, sets)
        res.timing.candidate = res.timing.eager
        res.roofline = _roofline(ref, data, res, options)
        res.timing.candidate = None
        if res.roofline:
            res.roofline.candidate_ms = None
            res.roofline.fraction_of_sol = (
                res.roofline.floor_ms / res.timing.eager.median_ms if res.timing.eager else None
            )
        res.status = Status.OK
        res.verdict = Verdict.PASS
        eager = res.timing.eager
        assert eager is not None, "the baseline window times eager"
        res.reasons.append(
            f"eager median {eager.median_ms:.4g} ms"
            + (f", torch.compile median {res.timing.compile.median_ms:.4g} ms" if res.timing.compile else "")
        )
    except _Stop as stop:
        res.status = stop.status
        res.reasons.append(stop.reason)
    except MALFORMED as exc:  # a reply the task's child forged or broke
        res.status = Status.RUNTIME_ERROR
        res.reasons.append(malformed_reply(exc))
    finally:
        if ref is not None:
            ref.close()
        share.release()
    res.duration_s = time.perf_counter() - started
    return res
