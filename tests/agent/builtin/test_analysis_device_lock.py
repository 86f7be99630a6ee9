"""The analysis's eager profile runs the task's forwards on the device, so it holds the
evaluations' device lock shared (sandbox.devlock), as an evaluation's trials do: it waits while
another evaluation times, and no timed loop starts while it profiles."""

from __future__ import annotations

import os
import threading
import time

from agent.builtin import analyze
from sandbox.devlock import DeviceLock, device_lock_name

from .conftest import task_source


def _blocked_on(path: str) -> bool:
    """Whether some flock request waits on `path` now (/proc/locks lists waiters with '->')."""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return any("->" in line and f":{ino} " in line for line in f)


def test_the_eager_profile_waits_for_a_timed_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("KW_LOCK_DIR", str(tmp_path))
    task = tmp_path / "task.py"
    task.write_text(task_source("row_softmax_small", rows=16, cols=32))
    timing = DeviceLock(device_lock_name("cpu"), str(tmp_path))
    out: dict = {}
    with timing.exclusive():
        worker = threading.Thread(target=lambda: out.update(analyze.analyze(str(task), "cpu", profile=True)))
        worker.start()
        deadline = time.monotonic() + 120
        while not _blocked_on(timing.path) and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.is_alive(), "the profile ran while another process held the device exclusively"
        assert _blocked_on(timing.path)
    worker.join(120)
    assert out["ok"] and out["eager_profile"]["waited_for_device"]
