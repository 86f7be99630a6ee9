"""The timing loop's arithmetic (sandbox/timing.py); the loop itself runs in every evaluation
test on the CPU and in tests/sandbox/test_gpu.py on the GPU."""

from __future__ import annotations

import pytest

from sandbox.timing import LATE_MS, Timer, call_time, charge_loop, summarize


def test_an_honest_call_is_timed_by_its_events_alone():
    ms, tail = call_time(event_ms=0.05, sync_wait_ms=0.004, idle_sync_ms=0.005)
    assert (ms, tail) == (0.05, 0.0)


def test_device_work_that_outlasts_the_stream_is_added():
    # a kernel on a side stream still ran 0.3 ms after the call's end event
    ms, tail = call_time(event_ms=0.05, sync_wait_ms=0.305, idle_sync_ms=0.005)
    assert tail == pytest.approx(0.3) and ms == pytest.approx(0.35) and tail > LATE_MS


def test_summary_statistics():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_ms"] == 3.0 and s["min_ms"] == 1.0 and s["max_ms"] == 100.0 and s["trials"] == 5
    assert s["spread"] == pytest.approx((61.6 - 1.4) / 3.0)


def test_warm_up_lasts_a_share_of_the_budget_then_the_calls_fit_it():
    calls = []

    def fn(x):
        calls.append(x)
        return x

    stats, _ = Timer("cpu").run(fn, [[1], [2]], budget_s=0.05, min_calls=5, max_calls=50, warmup=1)
    assert stats["trials"] == 50  # a no-op call: the budget allows more than max_calls
    assert len(calls) > 50 + 2  # warm-up kept calling for 10 ms, far more than 2 calls
    assert set(calls) == {1, 2}  # input sets rotate


def test_outputs_are_held_and_handed_to_the_hook_in_call_order():
    import torch

    seen = []
    stats, _ = Timer("cpu").run(
        lambda x: torch.full((4,), x),
        [[1.0], [2.0], [3.0]],
        budget_s=0.01,
        min_calls=20,
        max_calls=20,
        warmup=3,
        after_call=lambda out, k: seen.append((float(out[0]), k)),
    )
    assert stats["trials"] == 20 and len(seen) >= 23
    assert all(value == k + 1 for value, k in seen)  # every output reached the hook, with its input set


def test_a_forward_that_rewrites_one_buffer_is_visible_to_the_hook():
    import torch

    buf = torch.zeros(4)
    seen = []

    def fn(x):
        buf.fill_(x)  # returns the same tensor every call, rewritten: earlier outputs change
        return buf

    Timer("cpu").run(
        fn,
        [[1.0], [2.0], [3.0]],
        budget_s=0.01,
        min_calls=20,
        max_calls=20,
        warmup=3,
        after_call=lambda out, k: seen.append((float(out[0]), k)),
    )
    assert any(value != k + 1 for value, k in seen)


def test_each_call_costs_at_least_the_back_to_back_loop():
    """A host-bound forward: its events time 0.004 ms of kernels, back to back it runs at
    0.03 ms per call; every call is charged the loop's time. A device-bound one is unchanged."""
    assert charge_loop([0.004, 0.005, 0.2], 0.03) == [0.03, 0.03, 0.2]
    assert charge_loop([0.5, 0.6], 0.45) == [0.5, 0.6]
    assert charge_loop([0.5], None) == [0.5]  # cpu: perf_counter already times the host


def test_a_pinned_run_times_on_its_cpu_alone_and_gives_the_thread_its_cpus_back():
    import os

    before = os.sched_getaffinity(0)
    cpu = max(before)
    seen = []
    stats, _ = Timer("cpu", cpu=cpu).run(
        lambda x: seen.append(os.sched_getaffinity(0)) or x, [[1]], budget_s=0.01, min_calls=5, max_calls=10, warmup=1
    )
    assert seen and all(mask == {cpu} for mask in seen)  # warm-up and timed calls alike
    assert stats["cpu"] == cpu
    assert os.sched_getaffinity(0) == before
    unpinned, _ = Timer("cpu").run(lambda x: x, [[1]], budget_s=0.01, min_calls=5, max_calls=10, warmup=1)
    assert "cpu" not in unpinned


def test_a_cpu_the_process_cannot_use_is_an_error_not_a_silent_unpinned_run():
    import os

    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="cannot pin the timed loop to CPU 100000"):
        Timer("cpu", cpu=100_000).run(lambda x: x, [[1]], budget_s=0.01, min_calls=5, max_calls=10, warmup=1)
    assert os.sched_getaffinity(0) == before
