"""The timing loop, shared by the eager baseline, the torch.compile baseline and the candidate,
so all three are measured by exactly the same code in the same process setup.

Per timed call: (cuda) flush L2 by writing a buffer twice its size, queue a spin kernel of
HEAD_START_MS (`torch.cuda._sleep`, calibrated after each warm-up), record the start event, call, record the
end event on the same stream, wait for it, then synchronise the WHOLE device and time that wait
on the host: on an idle device it costs a fixed few microseconds (measured before the loop), and
anything beyond that is device work still running on other streams or from other threads after
the call's stream finished. That tail is added to the event time, so work moved off the timed
stream still counts. The head start lets the host queue the call before the device reaches it,
as it does in a loop of calls (and in `triton.testing.do_bench`, whose flush does the same): the
events then time the call's device work, not the host's moment (without it, a call of 4 us of
kernel and 25-45 us of Python read anywhere between 0.012 and 0.05 ms on the H200 host from one
run to the next). Host time is not thereby free: after the event-timed calls, the same function
runs in batches back to back (no flush, no wait between calls, the whole device synchronised at
the end of each batch), and each call's time is at least that loop's median per call, which is
the host's cost when the host is the bottleneck. A call that synchronises inside the forward
waits for the head start before its start event and for nothing after it, so its host work
after the wait is timed by the events. (cpu) perf_counter around the call. Inputs rotate among
several fresh sets, so no call can replay the previous result. `after_call` runs outside the
timed region, on batches of held outputs (the candidate's output fingerprints are taken there;
the baselines run the same hook).

Paired timing (sandbox.protocol._paired): every speedup compares callables timed in ONE window,
interleaved. Each callable is warmed up once (`Timer.warm`), then the parent runs `rounds`
rounds; in each round every callable runs one block of calls (`Timer.block`, into its `Series`),
in an order rotated per round (`round_order`). A round gives one ratio per baseline (the
baseline's block median over the candidate's), and the speedup is the median of those ratios
with a 95% interval (`paired_speedup`): the bootstrap over the rounds, widened by how far apart
separate windows of an honest copy land (`widen`, EvalOptions.window_spread). The spread of the eager baseline's block
medians over the rounds (`round_noise`) says whether the machine held still.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

# Bound before any candidate code runs, so patching time.perf_counter later changes nothing here.
_perf_counter = time.perf_counter

WARMUP_S, WARMUP_SHARE = 0.1, 0.2  # warm-up time: min(WARMUP_S, WARMUP_SHARE * budget)
LATE_MS = 0.01  # a device-sync wait this much above the idle cost: work outlasted the timed stream
HEAD_START_MS = 0.2  # cuda: device time queued ahead of each timed call (spin kernel)
LOOP_BATCHES, LOOP_MAX_CALLS = 5, 16  # cuda: the back-to-back pass, batches x calls per batch
LOOP_HOST_SHARE = 0.5  # cuda: the pass runs when the calls' host time is at least this share of their device time


def summarize(times_ms: Sequence[float]) -> dict[str, float]:
    xs = sorted(times_ms)
    n = len(xs)

    def pct(p: float) -> float:
        k = (n - 1) * p
        lo, hi = math.floor(k), math.ceil(k)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    median = statistics.median(xs)
    return {
        "median_ms": median,
        "min_ms": xs[0],
        "max_ms": xs[-1],
        "mean_ms": statistics.fmean(xs),
        "std_ms": statistics.pstdev(xs) if n > 1 else 0.0,
        "spread": (pct(0.9) - pct(0.1)) / median if median > 0 else 0.0,
        "trials": n,
    }


# Outputs held for the after-call hook, at most HOLD_CALLS of them and HOLD_BYTES in all: the hook
# (the outputs' fingerprint) then runs once per batch instead of between every two calls. Run
# between calls, its torch work evicted the next call's Python from the CPU caches and raised
# that call's host time by 10-20 us on the H200 host (benchmarks.timer_check, 2026-11-29), which a
# short kernel's timed time then carried. Held outputs also catch a forward that returns one
# buffer it rewrites: the fingerprint of an earlier call is taken after later calls ran.
HOLD_CALLS = 8
HOLD_BYTES = {"cuda": 2 << 30, "cpu": 256 << 20}


def _nbytes(out: Any) -> int:
    if isinstance(out, list | tuple):
        return sum(_nbytes(x) for x in out)
    if isinstance(out, dict):
        return sum(_nbytes(x) for x in out.values())
    return int(getattr(out, "nbytes", 0) or 0)


class _Batch:
    """Outputs waiting for the after-call hook, handed over in call order."""

    def __init__(self, hook: Callable[[Any, int], None] | None, budget_bytes: int):
        self.hook, self.budget, self.size = hook, budget_bytes, 0
        self.pending: list[tuple[Any, int]] = []

    def add(self, out: Any, k: int) -> None:
        if self.hook is None:
            return
        if self.size == 0:  # from the first output: how many fit in the budget
            self.size = max(1, min(HOLD_CALLS, self.budget // max(1, _nbytes(out))))
        self.pending.append((out, k))
        if len(self.pending) >= self.size:
            self.settle()

    def settle(self) -> None:
        pending, self.pending = self.pending, []
        if self.hook is None:  # nothing was held (add keeps nothing without a hook)
            return
        for out, k in pending:
            self.hook(out, k)


def loop_calls(calls: int) -> int:
    """How many calls the back-to-back pass of a block of `calls` makes (Timer.loop_ms)."""
    return LOOP_BATCHES * max(2, min(LOOP_MAX_CALLS, calls // LOOP_BATCHES))


def loop_floor_ms(calls: int, loop_ms: float) -> float:
    """The least a back-to-back pass whose median batch took `loop_ms` per call can have taken in
    all: the median batch and the batches above it (half of them, rounded up) took at least that
    per call. An account claiming a larger median than its pass's sum allows is forged."""
    return loop_ms * (loop_calls(calls) // LOOP_BATCHES) * ((LOOP_BATCHES + 1) // 2)


def unaccounted_ms(wall_ms: float, account: dict[str, float], median_ms: float, rewarm: int) -> float:
    """Per timed call, the part of a block's wall time (measured by the parent, from its
    request to the reply) that the block's own account does not explain: its timed calls
    (`sum_ms`, charged), the back-to-back pass (`loop_sum_ms`, as measured), and its
    untimed re-warm calls (at the median each). What is left is the harness's work between
    calls and the messages, about the same on both sides of a paired window; a timer whose
    records were shortened shows the difference here. The pass explains no more than its median
    per call times its calls, so claiming a longer pass than ran cannot hide time: each call is
    charged at least that median (charge_loop)."""
    calls = max(1, int(account["calls"]))
    pass_ms = min(account["loop_sum_ms"], loop_calls(calls) * account["loop_ms"])
    return (wall_ms - account["sum_ms"] - pass_ms - rewarm * median_ms) / calls


def charge_loop(times_ms: Sequence[float], loop_ms: float | None) -> list[float]:
    """Each call's time, at least the back-to-back loop's time per call: a forward whose host
    side (Python, allocations, launches) outlasts its kernels costs its host time in a loop, and
    the head start must not hide that."""
    if loop_ms is None:
        return list(times_ms)
    return [max(t, loop_ms) for t in times_ms]


def call_time(event_ms: float, sync_wait_ms: float, idle_sync_ms: float) -> tuple[float, float]:
    """(time of the call, tail) on cuda: the events' time plus whatever the whole-device
    synchronise after the end event waited beyond its idle cost (device work that outlasted
    the call's stream). An honest single-stream call waits about the idle cost: tail ~ 0."""
    tail = max(0.0, sync_wait_ms - idle_sync_ms)
    return event_ms + tail, tail


@contextlib.contextmanager
def pinned(cpu: int | None, strict: bool = True) -> Iterator[bool]:
    """This thread on `cpu` alone for the block (sched_setaffinity of pid 0 is the calling thread),
    then back on the CPUs it had; yields whether it is pinned. A CPU this process may not use
    (offline, outside its cpuset) is an error when `strict` (a CPU the user configured: a timing
    that silently ran elsewhere would be labelled with the wrong CPU); otherwise (a CPU the
    protocol chose for a window) the block runs unpinned."""
    if cpu is None:
        yield False
        return
    before = os.sched_getaffinity(0)
    if before == {cpu}:  # the whole child is confined there, and may not move (limits.confine)
        yield True
        return
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        if not strict:
            yield False
            return
        raise RuntimeError(
            f"cannot pin the timed loop to CPU {cpu} ({exc.strerror}); fix KERNELWRIGHT_TIMING_CPU / timing_cpu"
        ) from exc
    try:
        yield True
    finally:
        os.sched_setaffinity(0, before)


class Timer:
    def __init__(self, device: str, lock: Any = None, cpu: int | None = None, strict_cpu: bool = True):
        """`lock`: a sandbox.devlock.DeviceLock, held exclusively for each whole run (warm-up
        included), so no other evaluation's work shares the device with a timed call. `cpu`: the
        CPU this thread is pinned to for each whole run (EvalOptions.timing_cpu), so that eager,
        torch.compile and candidate launch from the same, otherwise idle, CPU."""
        self.device = device
        self.lock = lock
        self.cpu = cpu
        self.strict_cpu = strict_cpu
        self.unpinned_runs = 0  # warm-ups and blocks that could not be pinned (strict_cpu False)
        self._sync_floor_ms = 0.0
        # cuda, the last run's timed calls: (event ms, tail ms, host ms, whether the device reached the
        # start event before the host had queued the call, i.e. the host outlasted the head start)
        self._parts: list[tuple[float, float, float, bool]] = []
        self._flush_buf: Any = None  # cuda: a tensor larger than L2, zeroed before each timed call
        self._head_cycles = 0  # spin-kernel cycles of HEAD_START_MS, calibrated after each run's warm-up
        if device == "cuda":
            import torch

            l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (64 << 20)
            self._flush_buf = torch.empty(max(2 * l2, 128 << 20) // 4, dtype=torch.float32, device="cuda")
            self._sync = torch.cuda.synchronize
            self._sleep = torch.cuda._sleep
            # one pair of events for every call (each call is synchronised before the next records
            # them): creating two per call cost host time between the flush and the call, time the
            # flush would otherwise spend covering the call's own host side
            self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    @property
    def pinned_cpu(self) -> int | None:
        """The CPU every run so far was pinned to, or None."""
        return self.cpu if self.unpinned_runs == 0 else None

    @property
    def clock(self) -> str:
        return "cuda_events" if self.device == "cuda" else "perf_counter"

    @property
    def late_calls(self) -> int:
        """Timed calls of the last run whose work outlasted their stream (their tail was added)."""
        return sum(tail > LATE_MS for _, tail, _, _ in self._parts)

    def idle_sync_ms(self, n: int = 31) -> float:
        """What a whole-device synchronise costs the host when nothing is running (median)."""
        self._sync()
        xs = []
        for _ in range(n):
            t0 = _perf_counter()
            self._sync()
            xs.append((_perf_counter() - t0) * 1000.0)
        return statistics.median(xs)

    def _calibrate_head_start(self) -> None:
        """Spin cycles per HEAD_START_MS, measured with the clocks up (after a warm-up): the spin
        kernel counts SM cycles, so a calibration at idle clocks (345 MHz against 1980 on the H200)
        would give a head start several times shorter than intended."""
        n = 200_000
        self._sleep(1000)
        self._start.record()
        self._sleep(n)
        self._end.record()
        self._end.synchronize()
        ms = self._start.elapsed_time(self._end)
        self._head_cycles = int(HEAD_START_MS * n / ms) if ms > 0 else n

    def loop_ms(self, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], calls: int) -> tuple[float, float]:
        """Median time per call of `fn` called back to back (cuda): LOOP_BATCHES batches, the whole
        device synchronised after each (the idle cost of that synchronise taken off); and the
        pass's whole time. The parent bounds the pass by that sum, not by the median times the
        calls: on a loaded host the batches differ, and a median above their mean would account
        for time the block never took (host-bound LSTM and GRU tasks were rejected as forged,
        2026-12-07)."""
        per = loop_calls(calls) // LOOP_BATCHES
        k, j, xs = len(input_sets), 0, []
        for _ in range(LOOP_BATCHES):
            self._sync()
            t0 = _perf_counter()
            for _ in range(per):
                out = fn(*input_sets[j % k])
                del out
                j += 1
            self._sync()
            xs.append(max(0.0, (_perf_counter() - t0) * 1000.0 - self._sync_floor_ms) / per)
        return statistics.median(xs), sum(xs) * per

    def one(self, fn: Callable[..., Any], inputs: Sequence[Any]) -> tuple[float, Any]:
        if self.device == "cuda":
            self._flush_buf.zero_()
            if self._head_cycles:
                self._sleep(self._head_cycles)
            start, end = self._start, self._end
            start.record()
            h0 = _perf_counter()
            out = fn(*inputs)
            host = (_perf_counter() - h0) * 1000.0  # the call's host time: Python and launches
            end.record()
            limited = start.query()  # the device reached the call before the host had queued it
            end.synchronize()
            t0 = _perf_counter()
            self._sync()
            waited = (_perf_counter() - t0) * 1000.0  # the synchronise alone, as idle_sync_ms measures it
            event = start.elapsed_time(end)
            ms, tail = call_time(event, waited, self._sync_floor_ms)
            self._parts.append((event, tail, host, limited))
            return ms, out
        t0 = _perf_counter()
        out = fn(*inputs)
        return (_perf_counter() - t0) * 1000.0, out

    def warm(
        self,
        fn: Callable[..., Any],
        input_sets: Sequence[Sequence[Any]],
        budget_s: float,
        warmup: int,
        max_calls: int,
        after_call: Callable[[Any, int], None] | None = None,
    ) -> float:
        """Warm-up: at least `warmup` calls (and one per input set) and at least min(WARMUP_S,
        WARMUP_SHARE * budget_s) of them (a device that idled between evaluations is still raising
        its clocks during the first calls). Returns the estimated time per call (the lower quartile
        of the later half). cuda: measures the idle synchronise cost first and calibrates the head start
        after (the spin kernel's cycles per ms follow the SM clock)."""
        with pinned(self.cpu, self.strict_cpu) as on_cpu:
            self.unpinned_runs += self.cpu is not None and not on_cpu
            if self.device == "cuda":
                self._sync_floor_ms = self.idle_sync_ms()
            k = len(input_sets)
            warm_ms = []
            warm_until = _perf_counter() + min(WARMUP_S, WARMUP_SHARE * budget_s)
            i = 0
            batch = _Batch(after_call, HOLD_BYTES.get(self.device, HOLD_BYTES["cpu"]))
            while i < max(warmup, k) or (_perf_counter() < warm_until and i < max_calls):
                ms, out = self.one(fn, input_sets[i % k])
                warm_ms.append(ms)
                batch.add(out, i % k)
                del out
                i += 1
            batch.settle()
            if self.device == "cuda":
                self._calibrate_head_start()
            # the lower quartile of the later half: on a loaded host a median can be a descheduled
            # call's time, and an estimate 100x too long leaves blocks of a few calls
            later = sorted(warm_ms[-max(1, len(warm_ms) // 2) :])
            return max(later[(len(later) - 1) // 4], 1e-3)

    def block(
        self,
        fn: Callable[..., Any],
        input_sets: Sequence[Sequence[Any]],
        calls: int,
        series: Series,
        after_call: Callable[[Any, int], None] | None = None,
        rewarm: int = 0,
        exchange: Any = None,
    ) -> float:
        """`calls` timed calls of `fn` into `series` (after `rewarm` untimed ones: the first call
        after another process ran finds the CPU caches cold), continuing the series' rotation of
        input sets; with an `exchange` (timed_checks.Exchange over `input_sets`) a call may run on
        another set's values, and `after_call` gets the index of the values it ran on. cuda: the
        back-to-back pass of this block's calls where it can bind (see LOOP_HOST_SHARE), its
        time per call the floor of every call of the block. Returns the block's median
        (charged) time."""
        with pinned(self.cpu, self.strict_cpu) as on_cpu:
            self.unpinned_runs += self.cpu is not None and not on_cpu
            k = len(input_sets)
            batch = _Batch(after_call, HOLD_BYTES.get(self.device, HOLD_BYTES["cpu"]))
            for _ in range(rewarm):
                j = series.next_set(k)
                _, out = self.one(fn, input_sets[j])
                batch.add(out, j)
                del out
            self._parts = []
            times = []
            for _ in range(calls):
                j = series.next_set(k)
                i = exchange.before(j) if exchange is not None else j
                ms, out = self.one(fn, input_sets[j])
                if exchange is not None:
                    exchange.after(j, i)
                times.append(ms)
                batch.add(out, i)
                del out
            batch.settle()
            loop, loop_sum = None, 0.0
            if self._parts:
                device_ms, host_ms = statistics.median(times), statistics.median(h for _, _, h, _ in self._parts)
                # the back-to-back pass only where it can bind: a call whose host time (hidden work
                # included: it is measured on the host) is under half its device time runs back to
                # back at about its device time, and a long call is not timed twice
                if host_ms >= LOOP_HOST_SHARE * device_ms:
                    loop, loop_sum = self.loop_ms(fn, input_sets, calls)
            return series.add(times, charge_loop(times, loop), self._parts, loop, self._sync_floor_ms, loop_sum)

    def run(
        self,
        fn: Callable[..., Any],
        input_sets: Sequence[Sequence[Any]],
        budget_s: float,
        min_calls: int,
        max_calls: int,
        warmup: int,
        after_call: Callable[[Any, int], None] | None = None,
    ) -> tuple[dict[str, float], float]:
        """One callable alone: warm-up and one block of clamp(budget / estimate, min_calls,
        max_calls) calls, holding the lock exclusively throughout (the device ceilings, the
        bench's comparison with do_bench). Evaluations time in rounds (module docstring).
        Returns (stats, wall seconds of the timed phase)."""
        with self.lock.exclusive() if self.lock is not None else contextlib.nullcontext():
            held_from = time.time()
            est = self.warm(fn, input_sets, budget_s, warmup, max_calls, after_call)
            calls = int(min(max_calls, max(min_calls, budget_s * 1000.0 / est)))
            series = Series()
            wall0 = _perf_counter()
            self.block(fn, input_sets, calls, series, after_call)
            wall = _perf_counter() - wall0
            stats = series.stats(self.pinned_cpu)
            # wall-clock seconds (time.time) while the device lock was held: devlock.overlapping_windows
            # checks that no two evaluations' timed loops ran at once on one device
            stats["window"] = [held_from, time.time()]
            return stats, wall


class Series:
    """The timed calls of one callable over the blocks of a window: their times (charged with the
    back-to-back floor), per-block medians, and on cuda each call's parts."""

    def __init__(self) -> None:
        self.times: list[float] = []  # charged
        self.raw: list[float] = []  # before the back-to-back floor (cuda: the device time)
        self.blocks: list[float] = []  # each block's median (charged)
        self.parts: list[tuple[float, float, float, bool]] = []
        self.loops: list[float] = []
        self.sync_floor_ms = 0.0
        self.last_block: dict[str, float] = {}  # the latest block's account, for the parent's clock
        self._set = 0

    def next_set(self, k: int) -> int:
        j = self._set % k
        self._set += 1
        return j

    def add(
        self,
        raw: list[float],
        charged: list[float],
        parts: list,
        loop: float | None,
        sync_floor_ms: float,
        loop_sum: float = 0.0,
    ) -> float:
        self.raw.extend(raw)
        self.times.extend(charged)
        self.parts.extend(parts)
        if loop is not None:
            self.loops.append(loop)
        self.sync_floor_ms = sync_floor_ms
        median = statistics.median(charged)
        self.blocks.append(median)
        self.last_block = {
            "sum_ms": sum(charged),
            "raw_ms": sum(raw),
            "loop_ms": loop or 0.0,
            "loop_sum_ms": loop_sum,
            "calls": len(charged),
        }
        return median

    @property
    def late_calls(self) -> int:
        """Timed calls whose work outlasted their stream (their tail was added)."""
        return sum(tail > LATE_MS for _, tail, _, _ in self.parts)

    def stats(self, cpu: int | None = None) -> dict[str, Any]:
        stats: dict[str, Any] = summarize(self.times)
        if cpu is not None:
            stats["cpu"] = cpu
        if self.parts:
            stats["event_median_ms"] = statistics.median(e for e, _, _, _ in self.parts)
            stats["tail_median_ms"] = statistics.median(t for _, t, _, _ in self.parts)
            stats["host_median_ms"] = statistics.median(h for _, _, h, _ in self.parts)
            stats["sync_floor_ms"] = self.sync_floor_ms
            stats["loop_ms"] = statistics.median(self.loops) if self.loops else None
            stats["device_median_ms"] = statistics.median(self.raw)
            stats["host_limited_calls"] = sum(lim for _, _, _, lim in self.parts)
        return stats


# ---- paired timing: the rounds and their statistics --------------------------------------------

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 17  # fixed: the same rounds always give the same interval
REWARM_BELOW_MS = 5.0  # blocks of calls shorter than this start with one untimed call


def round_order(names: Sequence[str], r: int) -> list[str]:
    """Round r's order: the names rotated by r (A B C, B C A, C A B, ...), so that no callable
    always runs first, or always right after another process."""
    n = len(names)
    return [names[(r + i) % n] for i in range(n)]


def calls_per_block(est_ms: float, budget_s: float, rounds: int, min_calls: int, max_calls: int) -> int:
    """A callable's calls per block: its budget spread over the rounds (so every block lasts about
    the same time, whatever the callable's speed), at least min_calls over all rounds and at least 3
    per block (a block's median), at most max_calls over all rounds."""
    want = budget_s * 1000.0 / max(est_ms, 1e-6) / rounds
    low = max(3, math.ceil(min_calls / rounds))
    high = max(low, max_calls // rounds)
    return int(min(high, max(low, round(want))))


def bootstrap_median_ci(
    values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, level: float = 0.95
) -> tuple[float, float]:
    """The percentile bootstrap interval of the median of `values`: `resamples` resamples with
    replacement, seeded (the same values give the same interval)."""
    import numpy as np

    xs = np.asarray(values, dtype=float)
    if xs.size == 0:
        raise ValueError("no values")
    if xs.size == 1:
        return float(xs[0]), float(xs[0])
    rng = np.random.default_rng(seed)
    meds = np.median(xs[rng.integers(0, xs.size, size=(resamples, xs.size))], axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(meds, [tail, 1.0 - tail])
    return float(lo), float(hi)


def widen(ratio: float, lo: float, hi: float, spread: float, z: float = 1.96) -> tuple[float, float]:
    """The bootstrap interval [lo, hi] around `ratio`, each side widened in log space by the
    between-window term: sqrt(side^2 + (z * spread)^2). `spread` is the log standard deviation of
    an honest copy's paired speedup between separate evaluations (EvalOptions.window_spread):
    the rounds of one window share its two processes, so their bootstrap cannot see how far
    another pair of processes would land."""
    if spread <= 0 or not (ratio > 0 and lo > 0 and hi > 0) or math.isinf(ratio):
        return lo, hi
    w = z * spread
    down = math.hypot(math.log(ratio / lo), w)
    up = math.hypot(math.log(hi / ratio), w)
    return ratio * math.exp(-down), ratio * math.exp(up)


def paired_speedup(
    baseline_ms: Sequence[float],
    candidate_ms: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    spread: float = 0.0,
) -> dict[str, Any]:
    """The candidate against one baseline timed in the same rounds: a ratio per round (the
    baseline's block median over the candidate's: above 1 the candidate is faster), their
    median, and its 95% interval: the rounds' bootstrap widened by the between-window `spread`
    (`widen`)."""
    if len(baseline_ms) != len(candidate_ms) or not baseline_ms:
        raise ValueError("need one baseline and one candidate median per round")
    ratios = [b / c if c > 0 else math.inf for b, c in zip(baseline_ms, candidate_ms, strict=True)]
    ratio = statistics.median(ratios)
    lo, hi = widen(ratio, *bootstrap_median_ci(ratios, resamples, seed), spread)
    return {"ratio": ratio, "ci_low": lo, "ci_high": hi, "rounds": len(ratios), "per_round": ratios}


def round_noise(block_medians: Sequence[float]) -> float:
    """How much one callable's block medians moved over the rounds of one window: max / min - 1
    (0.0: every round alike). Computed on the eager baseline, whose code never changes: where it
    moves by more than EvalOptions.noise_limit, the machine did not hold still."""
    xs = [x for x in block_medians if x > 0]
    if len(xs) < 2:
        return 0.0
    return max(xs) / min(xs) - 1.0
