"""sandbox.devlock says when a lock request must wait for another process (on_wait), and a
probe tells whether a timed loop holds the device now (held_exclusively): what the job page's
"waiting for the device" step is made from. Another process holds the lock, for real."""

from __future__ import annotations

import subprocess
import sys
import time

from sandbox.devlock import DeviceLock, held_exclusively, prepare_dir

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def hold_exclusively(path: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, path, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_request_that_must_wait_says_so_and_when_it_has_the_lock(tmp_path):
    folder = prepare_dir(str(tmp_path / "locks"))
    lock = DeviceLock("cpu", folder)
    calls: list[tuple[bool, float]] = []
    holder = hold_exclusively(lock.path, 1.0)
    try:
        start = time.monotonic()
        with lock.shared(on_wait=lambda waiting: calls.append((waiting, time.monotonic() - start))):
            pass
    finally:
        holder.wait(timeout=10)
    assert [w for w, _ in calls] == [True, False]
    assert calls[0][1] < 0.5 and calls[1][1] > 0.5  # told at once, taken after the holder let go


def test_a_free_lock_is_taken_without_a_word(tmp_path):
    lock = DeviceLock("cpu", prepare_dir(str(tmp_path / "locks")))
    calls: list[bool] = []
    with lock.exclusive(on_wait=calls.append):
        assert held_exclusively("cpu", lock.path.rsplit("/", 1)[0])
    assert calls == []


def test_the_probe_sees_another_process_timing_and_takes_nothing(tmp_path):
    folder = prepare_dir(str(tmp_path / "locks"))
    assert not held_exclusively("cpu", folder)
    holder = hold_exclusively(DeviceLock("cpu", folder).path, 0.8)
    start = time.monotonic()
    try:
        assert held_exclusively("cpu", folder) and held_exclusively("cpu", folder)
        with DeviceLock("cpu", folder).shared():  # the probes took nothing, and a sharer waits for the holder
            assert time.monotonic() - start > 0.5
    finally:
        holder.wait(timeout=10)
    assert not held_exclusively("cpu", folder)
    with DeviceLock("cpu", folder).shared():
        assert not held_exclusively("cpu", folder)  # shared holders are not a timed loop


def test_an_evaluation_whose_window_waits_for_another_says_so():
    """A real evaluation: another process takes the cpu device exclusively just before the paired
    window (its "timing" step; the progress call runs in the parent, so the holder has the
    lock before the window asks), so the window must wait; its progress says "device_wait", then
    "timing"."""
    from sandbox import evaluate
    from sandbox.options import EvalOptions
    from tests.sandbox.helpers import task

    source = task("softmax_tiny.py")
    steps: list[str] = []
    holders: list[subprocess.Popen] = []

    def progress(step: str, detail: dict | None = None) -> None:
        steps.append(step)
        if step == "timing" and not holders:
            holders.append(hold_exclusively(DeviceLock("cpu", prepare_dir()).path, 2.0))

    try:
        res = evaluate(
            source,
            {"model_new.py": source.replace("class Model(", "class ModelNew(")},
            EvalOptions(backend="cpu", torch_ops="allow", compile_baseline=False, timing_budget_s=0.1),
            on_progress=progress,
        )
    finally:
        for h in holders:
            h.wait(timeout=30)
    assert res.status.value == "ok", res.reasons
    assert holders and "device_wait" in steps, steps
    after = steps[steps.index("device_wait") + 1 :]
    assert "timing" in after, steps


def test_no_child_holds_the_device_while_its_evaluation_waits_for_memory():
    """The order that keeps evaluations sharing a GPU out of deadlock: memory before the device.
    An evaluation about to wait for its memory share (the "reference" step, before the
    admission) has no child holding the device lock, so another evaluation that holds memory and
    waits for the device exclusively (its timed window) is never waiting on it. A probe from
    outside takes the lock exclusively at that step; the real evaluation then goes on."""
    from sandbox import evaluate
    from sandbox.devlock import LockTimeout
    from sandbox.options import EvalOptions
    from tests.sandbox.helpers import task

    source = task("softmax_tiny.py")
    probes: list[str] = []

    def progress(step: str, detail: dict | None = None) -> None:
        if step == "reference" and not probes:
            lock = DeviceLock("cpu", prepare_dir())
            try:
                with lock.exclusive(deadline_s=0.5):
                    probes.append("free")
            except LockTimeout:
                probes.append("held by a child")
            finally:
                lock.close()

    res = evaluate(
        source,
        {"model_new.py": source.replace("class Model(", "class ModelNew(")},
        EvalOptions(backend="cpu", torch_ops="allow", compile_baseline=False, timing_budget_s=0.1),
        on_progress=progress,
    )
    assert probes == ["free"], probes
    assert res.status.value == "ok", res.reasons
