"""The wall itself (sandbox.containment, sandbox.seccomp), checked on the running kernel: what a
sandboxed process can see and do. tests/sandbox/escape/ attacks it through whole evaluations."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox import EvalOptions, containment, devlock, seccomp
from sandbox.isolation import Limits, run_command

REPO = Path(__file__).resolve().parents[2]


def contained_python(code: str, timeout: float = 60) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(prefix="kw-test-") as d:
        rc, log, _ = run_command(
            [sys.executable, "-S", "-c", code], Path(d), Limits(wall_s=timeout), EvalOptions(backend="cpu")
        )
    return rc, log


def test_the_sandbox_is_available_here():
    st = containment.status(gpu=False)
    assert st.ok and st.mode == "bubblewrap", st.detail


def test_seccomp_denies_namespaces_and_ptrace_but_not_threads_or_processes():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        seccomp.install()
        libc = ctypes.CDLL(None, use_errno=True)
        out = {
            "unshare": libc.unshare(0x10000000) == -1 and ctypes.get_errno(),
            "ptrace": libc.syscall(101 if os.uname().machine == "x86_64" else 117, 16, os.getppid(), 0, 0) == -1
            and ctypes.get_errno(),
        }
        child = os.fork()
        if child == 0:
            os._exit(7)
        out["fork"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    got = json.loads(os.read(r, 4096))
    assert got == {"unshare": 1, "ptrace": 1, "fork": 7}  # EPERM, EPERM, fork still works


def test_a_contained_process_sees_only_itself_and_no_project_files():
    code = (
        "import os, json, socket\n"
        "out = {'uid': os.getuid(), 'pids': sorted(p for p in os.listdir('/proc') if p.isdigit())}\n"
        f"out['repo'] = sorted(os.listdir({str(REPO)!r}))\n"
        "try:\n    socket.create_connection(('127.0.0.1', 6379), timeout=2); out['net'] = 'connected'\n"
        "except OSError as e:\n    out['net'] = e.errno\n"
        f"try:\n    open({str(REPO / 'pwned')!r}, 'w'); out['write'] = 'ok'\n"
        "except OSError as e:\n    out['write'] = e.errno\n"
        "print(json.dumps(out))"
    )
    rc, log = contained_python(code)
    out = json.loads(log.strip().splitlines()[-1])
    assert rc == 0
    assert out["uid"] == containment.INSIDE_UID
    assert len(out["pids"]) <= 2  # bubblewrap's init and this process
    # the runtime only: our package, the environment, the CUDA toolchain (scripts/cuda_toolchain.sh)
    assert set(out["repo"]) <= {"sandbox", ".venv", ".cuda"}, out["repo"]
    assert out["net"] != "connected"
    # the write fails (read-only root), or, for a clone under /tmp, lands in the private /tmp
    assert out["write"] != "ok" or str(REPO).startswith("/tmp/")
    assert not (REPO / "pwned").exists()


def test_the_device_locks_are_not_there_inside():
    """flock works on a read-only descriptor: a process that could open a lock file could hold
    every evaluation's timing off the device (red team lock_hang). The parent holds the lock for
    its children (sandbox.devlock.ChildHold); inside, the folder does not exist."""
    folder = devlock.prepare_dir(devlock.LOCK_DIR)
    code = f"import os\ntry:\n    print(os.listdir({folder!r}))\nexcept OSError as e:\n    print('errno', e.errno)"
    rc, log = contained_python(code)
    assert rc == 0 and log.strip().splitlines()[-1] == "errno 2", log


def test_without_bubblewrap_nothing_runs(monkeypatch, tmp_path):
    monkeypatch.setenv(containment.BWRAP_ENV, str(tmp_path / "no-such-bwrap"))
    containment._probe.cache_clear()
    try:
        st = containment.status(gpu=False)
        assert not st.ok and st.mode == "unavailable"
        with pytest.raises(containment.Unavailable, match="untrusted code was not run"):
            contained_python("print('ran')")
    finally:
        monkeypatch.delenv(containment.BWRAP_ENV)
        containment._probe.cache_clear()
