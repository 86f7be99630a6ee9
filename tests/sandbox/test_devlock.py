"""The device lock: timing (exclusive) never overlaps other evaluations' work (shared), and
shared holders overlap each other. Real processes, real flock."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from sandbox.devlock import DeviceLock, prepare_dir


def _hold(folder: str, mode: str, seconds: float, log: str, barrier=None) -> None:
    lock = DeviceLock("testdev", folder)
    with getattr(lock, mode)():
        t0 = time.time()
        if barrier is not None:
            barrier.wait(30)  # only passes if every holder holds the lock at the same time
        time.sleep(seconds)
        t1 = time.time()
    with open(log, "a") as f:
        f.write(f"{mode} {t0} {t1}\n")


def _intervals(log: str) -> list[tuple[str, float, float]]:
    rows = [line.split() for line in open(log).read().splitlines()]
    return [(m, float(a), float(b)) for m, a, b in rows]


def _run(
    folder: str, log: str, modes: list[str], seconds: float = 0.3, together: bool = False
) -> list[tuple[str, float, float]]:
    # spawn, not fork: the test process has threads (a fork could inherit a held lock)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(modes)) if together else None
    procs = [ctx.Process(target=_hold, args=(folder, m, seconds, log, barrier)) for m in modes]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return _intervals(log)


def test_exclusive_holders_never_overlap_anyone(tmp_path):
    folder = prepare_dir(str(tmp_path / "locks"))
    rows = _run(folder, str(tmp_path / "log"), ["exclusive", "shared", "exclusive", "shared"])
    assert len(rows) == 4
    for i, (m1, a1, b1) in enumerate(rows):
        for m2, a2, b2 in rows[i + 1 :]:
            if "exclusive" in (m1, m2):
                assert b1 <= a2 + 1e-3 or b2 <= a1 + 1e-3, rows


def test_shared_holders_overlap(tmp_path):
    folder = prepare_dir(str(tmp_path / "locks"))
    # the holders meet at a barrier while holding the lock: were it exclusive, the barrier would
    # time out and the holders exit non-zero
    rows = _run(folder, str(tmp_path / "log"), ["shared"] * 3, seconds=0.1, together=True)
    assert len(rows) == 3


def test_exclusive_inside_shared_is_refused(tmp_path):
    lock = DeviceLock("x", prepare_dir(str(tmp_path / "locks")))
    assert lock.available
    with lock.shared(), pytest.raises(RuntimeError):
        with lock.exclusive():
            pass


def test_unusable_folder_degrades_to_no_lock(tmp_path):
    lock = DeviceLock("x", str(tmp_path / "missing" / "deeper"))
    assert not lock.available
    with lock.exclusive():
        pass
    assert os.path.exists(str(tmp_path / "missing")) is False


def test_an_evaluation_times_only_while_no_one_else_holds_the_device(quick):
    """The test holds the CPU's lock exclusively (as another evaluation's timing would): the
    evaluation finishes its correctness trials but cannot start timing until it is released."""
    import threading

    from sandbox import evaluate
    from sandbox.schema import Status
    from tests.sandbox.helpers import candidate, task

    opts = quick()
    evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), opts)  # baseline cached, zygote warm
    lock = DeviceLock("cpu", prepare_dir())
    assert lock.available
    done: dict = {}

    def go() -> None:
        done["res"] = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), opts)
        done["at"] = time.time()

    with lock.exclusive():
        t = threading.Thread(target=go)
        t.start()
        t.join(3.0)
        assert t.is_alive(), "the evaluation finished while the device was held exclusively elsewhere"
        released = time.time()
    t.join(120)
    assert done["res"].status == Status.OK, done["res"].reasons
    assert done["at"] >= released


def test_evaluations_sharing_the_device_never_time_at_once(quick):
    """Three evaluations at once on the cpu: their work overlaps, their timed loops (the windows
    each result records while holding the lock exclusively) do not. Without the lock they would."""
    import threading

    from sandbox import evaluate
    from sandbox.devlock import overlapping_windows, timed_windows
    from sandbox.schema import Status
    from tests.sandbox.helpers import candidate, task

    def run_three(opts) -> list[dict]:
        out: list = []
        spans: list = []

        def go() -> None:
            t0 = time.time()
            res = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), opts)
            spans.append((t0, time.time()))
            out.append(res)

        threads = [threading.Thread(target=go) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert [r.status for r in out] == [Status.OK] * 3, [r.reasons for r in out]
        assert max(s for s, _ in spans) < min(e for _, e in spans)  # the evaluations did run at once
        return [r.to_dict() for r in out]

    locked = run_three(quick(timing_budget_s=0.3))
    assert all(r["device_id"] == "cpu" for r in locked)
    assert len([w for r in locked for w in timed_windows(r)]) >= 3
    assert overlapping_windows(locked) == []
    unlocked = run_three(quick(timing_budget_s=0.3, device_lock=False))
    assert overlapping_windows(unlocked)  # the check can fail: without the lock the loops collide
