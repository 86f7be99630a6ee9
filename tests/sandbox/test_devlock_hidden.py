"""No sandboxed child can open the device lock files (red team lock_hang): a read-only descriptor
is enough for flock, and a candidate that took every lock shared at import and kept it made the
parent's timing window (exclusive, no deadline) wait for ever, with every other evaluation of the
device queued behind it. The parent holds the lock for its children instead (devlock.ChildHold).

Every test here uses a lock folder of its own (KERNELWRIGHT_LOCK_DIR), so none can hold up the
host's evaluations or the tests running beside it; the children only try to open the host's."""

from __future__ import annotations

import fcntl
import json
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sandbox import EvalOptions, containment, devlock
from sandbox.isolation import Limits, run_command

CPP = (Path(__file__).parent / "candidates" / "softmax_cpp" / "kernels" / "softmax.cpp").read_text()


@pytest.fixture
def own_locks(tmp_path, monkeypatch) -> str:
    """A lock folder of this test's own, for the evaluator and everything it starts."""
    folder = str(tmp_path / "locks")
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", folder)
    return devlock.prepare_dir()


def _probe_code(folders: list[str]) -> str:
    """Python that tries to open every lock file it can find, printing what it opened."""
    return (
        "import os, json\n"
        "opened, errors = [], {}\n"
        f"for d in {folders!r} + [os.environ.get('KW_LOCK_DIR') or '']:\n"
        "    if not d: continue\n"
        "    try: names = os.listdir(d)\n"
        "    except OSError as e: errors[d] = e.errno; continue\n"
        "    for n in names:\n"
        "        try: os.close(os.open(os.path.join(d, n), os.O_RDONLY)); opened.append(os.path.join(d, n))\n"
        "        except OSError as e: errors[n] = e.errno\n"
        "print(json.dumps({'opened': opened, 'errors': errors}))\n"
    )


def test_a_contained_command_cannot_open_the_device_locks(own_locks):
    """bubblewrap's sandbox (a build, the analysis): neither the host's lock folder nor this
    test's is there. It was bound in read-only, and the command could flock its files."""
    host = devlock.prepare_dir(devlock.LOCK_DIR)  # exists, as on every host that evaluates
    assert os.listdir(host) and os.listdir(own_locks)
    with tempfile.TemporaryDirectory(prefix="kw-test-") as d:
        rc, log, _ = run_command(
            [sys.executable, "-S", "-c", _probe_code([host, own_locks])],
            Path(d),
            Limits(wall_s=60),
            EvalOptions(backend="cpu"),
            env_extra={"KW_LOCK_DIR": own_locks},  # what the analysis passes: held by the parent, never told
        )
    assert rc == 0, log
    out = json.loads(log.strip().splitlines()[-1])
    assert out["opened"] == [], out


def _lock_holding_candidate(folders: list[str]) -> dict[str, str]:
    """The red team's lock_hang candidate: at import, every lock file it can open taken shared
    and kept (non-blocking here, so it never waits on a host's timing window)."""
    model = f"""import fcntl
import os

import kwrt
import torch.nn as nn

lib = kwrt.load()
HELD = []
for d in {folders!r} + [os.environ.get("KW_LOCK_DIR") or ""]:
    try:
        names = sorted(os.listdir(d)) if d else []
    except OSError:
        continue
    for name in names:
        try:
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            HELD.append(fd)
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        import torch

        rows, cols = x.shape
        out = torch.empty_like(x)
        lib.softmax_rows(x, out, rows, cols, kwrt.stream())
        return out
"""
    return {"model_new.py": model, "kernels/softmax.cpp": CPP}


def test_a_candidate_holding_the_locks_cannot_stall_the_evaluation(own_locks, quick, monkeypatch):
    """The red team's attack, whole: the evaluation must return, timed, within its time limit
    (it hung for ever: the window waited for the candidate's shared hold)."""
    from sandbox import evaluate, protocol
    from sandbox.schema import Status
    from tests.sandbox.helpers import task

    # the wall itself, behind the run-time refusals in the candidate's process (sandbox.audit_hook)
    monkeypatch.setattr(protocol, "RUN_TIME_REFUSALS", False, raising=False)
    opts = quick(eval_timeout_s=40)
    files = _lock_holding_candidate([devlock.LOCK_DIR, own_locks])
    done: dict = {}
    thread = threading.Thread(
        target=lambda: done.update(res=evaluate(task("softmax_tiny.py"), files, opts)), daemon=True
    )
    thread.start()
    thread.join(90)
    assert not thread.is_alive(), "evaluate() did not return: the window waits for a lock the candidate holds"
    res = done["res"]
    assert res.status == Status.OK, res.reasons
    assert res.timing.candidate is not None


def test_the_parent_holds_the_lock_while_its_children_work(own_locks, quick):
    """The children cannot take the lock, so their parent takes it for them: while another
    process holds the device exclusively, neither child gets its set-up (the reference's model
    waits, its step the last one, and the candidate's import, sent after it, with it)."""
    from sandbox import evaluate
    from sandbox.schema import Status
    from tests.sandbox.helpers import candidate, task

    steps: list[str] = []
    done: dict = {}
    timing = devlock.DeviceLock("cpu", own_locks)
    with timing.exclusive():
        thread = threading.Thread(
            target=lambda: done.update(
                res=evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), quick(), lambda s, d: steps.append(s))
            ),
            daemon=True,
        )
        thread.start()
        deadline = time.monotonic() + 60
        while "starting" not in steps and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.0)
        assert thread.is_alive() and steps[-1] == "reference" and "import" not in steps, steps
    thread.join(120)
    assert done["res"].status == Status.OK, done["res"].reasons


# ---- devlock.ChildHold and the deadline, unit by unit ----------------------------------------


def _hold_in_other_process(path: str, mode: int, ready, release) -> None:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, mode)
    ready.set()
    release.wait(30)


def _state(path: str) -> str:
    """'free', 'shared' or 'exclusive', probed from a fresh descriptor, taking nothing."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return "free"
        except BlockingIOError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return "shared"
        except BlockingIOError:
            return "exclusive"
    finally:
        os.close(fd)


def test_a_child_hold_lasts_from_a_command_to_its_last_reply(own_locks):
    hold = devlock.ChildHold("cpu", own_locks)
    path = hold.lock.path
    far = time.monotonic() + 10
    hold.before_send({"options": {}}, far)  # a set-up: shared until the next reply
    assert _state(path) == "shared"
    hold.after_reply()
    assert _state(path) == "free"
    hold.before_send({"cmd": "trial"}, far)  # pipelined: a trial, then a comparison
    hold.before_send({"cmd": "compare"}, far)
    hold.after_reply()
    assert _state(path) == "shared"
    hold.after_reply()
    assert _state(path) == "free"
    for cmd in ("warm", "block"):  # inside the parent's own exclusive window: nothing
        hold.before_send({"cmd": cmd}, far)
        assert _state(path) == "free"
        hold.after_reply()
    hold.before_send({"cmd": "profile"}, far)
    assert _state(path) == "exclusive"
    hold.after_reply()
    assert _state(path) == "free"
    hold.before_send({"cmd": "trial"}, far)
    hold.drop()  # the child killed before it answered
    assert _state(path) == "free"
    hold.close()


def test_a_waiter_with_a_deadline_gets_lock_timeout(own_locks):
    """Defence in depth: a caller with a deadline (the parent's timing window) fails cleanly
    instead of waiting for ever on whoever holds the device."""
    lock = devlock.DeviceLock("cpu", own_locks)
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_in_other_process, args=(lock.path, fcntl.LOCK_SH, ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        t0 = time.monotonic()
        with pytest.raises(devlock.LockTimeout):
            with lock.exclusive(deadline_s=0.3):
                pytest.fail("taken while another process held it shared")
        assert 0.3 <= time.monotonic() - t0 < 2.0
        assert lock._held is None
        with lock.shared(deadline_s=0.3):  # shared beside shared: at once
            pass
        hold = devlock.ChildHold("cpu", own_locks)
        with pytest.raises(devlock.LockTimeout):
            hold.before_send({"cmd": "profile"}, time.monotonic() + 0.2)
        assert hold.pending == 0 and hold.held is None
        hold.close()
    finally:
        release.set()
        holder.join(30)
    with lock.exclusive(deadline_s=5):
        assert _state(lock.path) == "exclusive"


def test_the_lock_folder_is_covered_where_a_sandbox_would_see_it(monkeypatch, tmp_path):
    """A lock folder below a folder bound into the sandbox gets an empty read-only tmpfs over it;
    elsewhere nothing is bound at all."""
    inside = os.path.join(containment.runtime_paths()[0], "kw-locks")
    monkeypatch.setenv(devlock.DIR_ENV, inside)
    args = containment.bwrap_args([], gpu=False)
    i = args.index(inside)
    assert args[i - 1] == "--tmpfs" and args[i + 1 : i + 3] == ["--remount-ro", inside], args
    monkeypatch.setenv(devlock.DIR_ENV, str(tmp_path / "locks"))
    args = containment.bwrap_args([], gpu=False)
    assert str(tmp_path / "locks") not in args and devlock.LOCK_DIR not in args


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs an NVIDIA GPU")
def test_a_cuda_child_starts_only_while_no_timed_loop_holds_the_gpu(own_locks):
    """A CUDA child creates its context as it starts, before any message (a spare does so while
    another evaluation may be timing): its parent takes the device shared before starting it
    and holds it for Child.START_HOLD_S, as the child's own lock did before it lost the folder."""
    from sandbox.isolation import Child

    name = devlock.host_lock_name("cuda")
    assert name, "one GPU visible"
    lock = devlock.DeviceLock(name, own_locks)
    made: dict = {}
    env = {"KW_BACKEND": "cuda", "KW_LOCK_DIR": own_locks}
    with lock.exclusive():  # what a timed loop holds
        thread = threading.Thread(
            target=lambda: made.update(child=Child("reference", Limits(wall_s=60), EvalOptions(backend="cuda"), env)),
            daemon=True,
        )
        thread.start()
        thread.join(3.0)
        assert thread.is_alive() and not made, "a CUDA child started while the GPU was held exclusively"
    thread.join(60)
    child = made["child"]
    try:
        assert _state(lock.path) == "shared"  # its context is being created
        time.sleep(Child.START_HOLD_S + 1.0)
        assert _state(lock.path) == "free"  # an idle spare holds nothing
        assert child.proc.poll() is None
    finally:
        child.close()


def test_a_paired_window_that_cannot_get_the_device_ends_as_a_timeout(own_locks):
    """A holder of the lock that never lets go (one of ours that hangs) ends the window with a
    timeout that says why (protocol._Paired.run), instead of a wait for ever."""
    from sandbox import protocol
    from sandbox.schema import Status

    path = os.path.join(own_locks, devlock.host_lock_name("cpu") + ".lock")
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_in_other_process, args=(path, fcntl.LOCK_EX, ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        started = time.monotonic()
        with pytest.raises(protocol._Stop) as stop:
            with protocol._window_lock(devlock.DeviceLock("cpu"), None, 0.5):
                pass
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join(10)
    assert stop.value.status == Status.TIMEOUT and "device stayed busy" in stop.value.reason
    assert 0.5 <= waited < 5, waited
