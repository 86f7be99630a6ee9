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
        for out, k in pending:
            self.hook(out, k)


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
def pinned(cpu: int | None) -> Iterator[None]:
    """This thread on `cpu` alone for the block (sched_setaffinity of pid 0 is the calling thread),
    then back on the CPUs it had. A CPU this process may not use (offline, outside its cpuset)
    is an error: a timing that silently ran elsewhere would be labelled with the wrong CPU."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        raise RuntimeError(f"cannot pin the timed loop to CPU {cpu} ({exc.strerror}); "
                           f"fix KERNELWRIGHT_TIMING_CPU / timing_cpu") from exc
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class Timer:
    def __init__(self, device: str, lock: Any = None, cpu: int | None = None):
        """`lock`: a sandbox.devlock.DeviceLock, held exclusively for each whole run (warm-up
        included), so no other evaluation's work shares the device with a timed call. `cpu`: the
        CPU this thread is pinned to for each whole run (EvalOptions.timing_cpu), so that eager,
        torch.compile and candidate launch from the same, otherwise idle, CPU."""
        self.device = device
        self.lock = lock
        self.cpu = cpu
        self._sync_floor_ms = 0.0
        # cuda, the last run's timed calls: (event ms, tail ms, host ms, whether the device reached the
        # start event before the host had queued the call, i.e. the host outlasted the head start)
        self._parts: list[tuple[float, float, float, bool]] = []
        self._flush_buf = None
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

    def loop_ms(self, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], calls: int) -> float:
        """Median time per call of `fn` called back to back (cuda): LOOP_BATCHES batches, the whole
        device synchronised after each (the idle cost of that synchronise taken off)."""
        per = max(2, min(LOOP_MAX_CALLS, calls // LOOP_BATCHES))
        k, j, xs = len(input_sets), 0, []
        for _ in range(LOOP_BATCHES):
            self._sync()
            t0 = _perf_counter()
            for _ in range(per):
                out = fn(*input_sets[j % k])
                del out
                j += 1
            self._sync()
            xs.append(((_perf_counter() - t0) * 1000.0 - self._sync_floor_ms) / per)
        return statistics.median(xs)

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
        """Returns (stats, wall seconds of the timed phase)."""
        with self.lock.exclusive() if self.lock is not None else contextlib.nullcontext(), pinned(self.cpu):
            held_from = time.time()
            if self.device == "cuda":
                self._sync_floor_ms = self.idle_sync_ms()
            k = len(input_sets)
            warm_ms = []
            # at least `warmup` calls and a fifth of the budget (at most 0.1 s): a device that
            # idled between evaluations is still raising its clocks during the first calls
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
            if self.device == "cuda":  # every run, after its warm-up: the cycles per ms follow the SM clock
                self._calibrate_head_start()
            est = max(statistics.median(warm_ms[-max(1, len(warm_ms) // 2):]), 1e-3)
            calls = int(min(max_calls, max(min_calls, budget_s * 1000.0 / est)))
            times = []
            self._parts = []
            wall0 = _perf_counter()
            for i in range(calls):
                ms, out = self.one(fn, input_sets[i % k])
                times.append(ms)
                batch.add(out, i % k)
                del out
            batch.settle()
            loop = None
            if self._parts:
                device_ms, host_ms = statistics.median(times), statistics.median(h for _, _, h, _ in self._parts)
                # the back-to-back pass only where it can bind: a call whose host time (hidden work
                # included: it is measured on the host) is under half its device time runs back to
                # back at about its device time, and a long call is not timed twice
                if host_ms >= LOOP_HOST_SHARE * device_ms:
                    loop = self.loop_ms(fn, input_sets, calls)
            wall = _perf_counter() - wall0
            stats = summarize(charge_loop(times, loop))
            # wall-clock seconds (time.time) while the device lock was held: devlock.overlapping_windows
            # checks that no two evaluations' timed loops ran at once on one device
            stats["window"] = [held_from, time.time()]
            if self.cpu is not None:
                stats["cpu"] = self.cpu
            if self._parts:
                stats["event_median_ms"] = statistics.median(e for e, _, _, _ in self._parts)
                stats["tail_median_ms"] = statistics.median(t for _, t, _, _ in self._parts)
                stats["host_median_ms"] = host_ms
                stats["sync_floor_ms"] = self._sync_floor_ms
                stats["loop_ms"] = loop
                stats["device_median_ms"] = device_ms
                stats["host_limited_calls"] = sum(lim for _, _, _, lim in self._parts)
            return stats, wall
