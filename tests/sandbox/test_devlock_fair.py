"""A timing window is not starved by other evaluations' shared holds that overlap one another.

Six KernelBench shards on one H100 (2026-12-07; seven in the twenty-seventh session) stalled for
minutes at 0% utilisation: each evaluation's torch.compile warm-up holds the device shared for
minutes, the holds of several evaluations overlap, and flock(2) grants a new shared hold while an
exclusive request waits, so no timed loop could start. Here three processes take the lock
shared in turn, always one of them holding it, through the real DeviceLock; an exclusive request
must get it once the holds that began before it have ended."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from sandbox.devlock import DeviceLock, LockTimeout, prepare_dir

READER = """
import sys, time
from sandbox.devlock import DeviceLock
lock = DeviceLock("cpu", sys.argv[1])
offset, hold, until = float(sys.argv[2]), float(sys.argv[3]), time.monotonic() + float(sys.argv[4])
time.sleep(offset)
print("started", flush=True)
while time.monotonic() < until:
    with lock.shared():
        time.sleep(hold)
    time.sleep(0.01)
"""


def test_an_exclusive_request_is_not_starved_by_overlapping_shared_holds(tmp_path):
    folder = prepare_dir(str(tmp_path / "locks"))
    # three readers, each holding 0.6 s out of every 0.61 s, offset by 0.2 s: the lock is never free
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, folder, str(0.2 * k), "0.6", "8"], stdout=subprocess.PIPE, text=True
        )
        for k in range(3)
    ]
    try:
        for r in readers:
            assert r.stdout.readline().strip() == "started"
        time.sleep(0.5)
        lock = DeviceLock("cpu", folder)
        start = time.monotonic()
        try:
            with lock.exclusive(deadline_s=4.0):
                waited = time.monotonic() - start
        except LockTimeout:
            pytest.fail("the exclusive request waited 4 s behind shared holds that kept overlapping")
        assert waited < 2.0, waited  # the holds begun before it end within 0.6 s
    finally:
        for r in readers:
            r.kill()
            r.wait(timeout=10)


def test_probes_and_locks_close_what_they_open(tmp_path):
    """The turnstile is a second open file per lock: the gpu worker's probe (held_exclusively,
    every few seconds for a whole evaluation) and a closed lock leave no descriptor behind."""
    import os

    from sandbox.devlock import held_exclusively

    folder = prepare_dir(str(tmp_path / "locks"))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        assert not held_exclusively("cpu", folder)
        lock = DeviceLock("cpu", folder)
        with lock.exclusive():
            pass
        lock.close()
    assert len(os.listdir("/proc/self/fd")) == before
