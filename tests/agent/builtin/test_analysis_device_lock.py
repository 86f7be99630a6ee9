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


def test_a_large_task_is_not_profiled_on_a_shared_gpu(tmp_path, monkeypatch):
    """Its forward would hold memory outside every evaluation's share (sandbox.devmem) and wait for
    the lock; the plan only loses its per-op breakdown. A small one is still profiled (tried: this
    machine's torch has no CUDA); on the CPU nothing is skipped."""
    import torch

    monkeypatch.setenv("KW_LOCK_DIR", str(tmp_path))
    model, inputs = torch.nn.Linear(64, 64), [torch.randn(128, 64)]
    size = sum(t.numel() * 4 for t in [inputs[0], *model.parameters()])
    monkeypatch.setattr(analyze, "PROFILE_MAX_BYTES", size - 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    result: dict = {}
    notes: list[str] = []
    analyze._profile_into(result, model, inputs, "cuda", notes)  # would fail on this machine's torch if run
    assert "eager_profile" not in result and "the eager profile was skipped" in notes[0]
    analyze._profile_into(result, model, inputs, "cpu", notes)
    assert result["eager_profile"]["device"] == "cpu" and len(notes) == 1
    monkeypatch.setattr(analyze, "PROFILE_MAX_BYTES", size)
    analyze._profile_into(result, model, inputs, "cuda", notes)  # at the limit it is tried (and fails here)
    assert len(notes) == 2 and "skipped" not in notes[1] and "the eager profile failed" in notes[1]


def _admitting(ready, go) -> None:
    from sandbox import devmem

    share = devmem.MemoryShare().open(TEST_GPU)
    share.admit()  # as an evaluation waiting for its memory holds the admission file
    ready.set()
    go.wait(120)
    share.release()


TEST_GPU = "kw-test-analysis-gpu"  # a device id of its own: the share's files are host-wide


def test_the_profile_is_skipped_rather_than_queued_behind_an_evaluations_memory_wait(monkeypatch):
    """On a GPU the analysis profiles only if a set-up's share of the device's memory is free at
    once (sandbox.devmem.MemoryShare.take_now): behind an evaluation being admitted it captures
    the graph without the profile and says why. (This machine's torch has no CUDA: a cuda
    analysis that does profile falls back to the CPU, which is what the second run shows.)"""
    import multiprocessing as mp

    from agent.builtin.graph import PROFILE_SKIPPED, analyze_source
    from sandbox import devlock

    monkeypatch.setattr(devlock, "host_lock_name", lambda device: TEST_GPU if device == "cuda" else None)

    source = task_source("row_softmax_small", rows=16, cols=32)
    ctx = mp.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    waiter = ctx.Process(target=_admitting, args=(ready, go))
    waiter.start()
    try:
        assert ready.wait(30)
        started = time.monotonic()
        held = analyze_source(source, device="cuda", profile=True)
        assert time.monotonic() - started < 100  # it did not wait for the waiter (released at 120 s)
    finally:
        go.set()
        waiter.join(30)
    assert held.ok and "eager_profile" not in held.data and PROFILE_SKIPPED in held.data["notes"]
    free = analyze_source(source, device="cuda", profile=True)
    assert free.ok and "eager_profile" in free.data and PROFILE_SKIPPED not in free.data["notes"]
