"""A host-wide reader-writer lock per device, so evaluations can share one GPU (or the CPU)
without disturbing each other's timings.

Timing loops (eager, torch.compile and candidate; the profiler, the device ceilings) hold the
device EXCLUSIVELY; every other use of the device by an evaluation child (reference trials, the
candidate's correctness trials, model set-up, the torch.compile warm-up call, a CUDA context's
creation) holds it SHARED. So compiles and correctness checks of several evaluations overlap
freely, while no timed call ever runs next to another evaluation's work. A child's hold lasts
only while it works on a command, never while it waits for the parent, so one evaluation's idle
reference child cannot block the timing of its own candidate.

The lock is flock(2) on a file under /tmp/kernelwright-locks (one per GPU UUID, or "cpu";
KERNELWRIGHT_LOCK_DIR names another folder), made and taken by trusted processes only. No
sandboxed child can open it (sandbox.containment binds the folder into no sandbox): flock works on
any open descriptor, read-only ones included, so a candidate that could open a lock file could
hold it shared forever and stall every timing window of the device (red team lock_hang). A child
that works on the device is covered by its parent instead (`ChildHold`, sandbox.isolation.Child):
shared from the command it is sent until its reply, exclusive for the commands that time
(EXCLUSIVE_COMMANDS). Processes outside Kernelwright are not covered. A waiter with a deadline
(`deadline_s`) gets LockTimeout instead of waiting for ever. Requests queue in order through a
second file, the turnstile (`<device>.turn`): flock(2) would grant a new shared hold while an
exclusive request waits, and overlapping shared holds would keep a timing window out for good.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

LOCK_DIR = "/tmp/kernelwright-locks"
DIR_ENV = "KERNELWRIGHT_LOCK_DIR"  # another folder (a test's own, so it never meets the host's locks)
OnWait = Callable[[bool], None]  # True: waiting for another process's hold; False: taken
POLL_S = (0.002, 0.02)  # a waiter with a deadline retries LOCK_NB, from the first to the second interval


class LockTimeout(TimeoutError):
    """The lock was not free before the caller's deadline (another process held it)."""


def lock_dir() -> str:
    """The lock folder: KERNELWRIGHT_LOCK_DIR, else /tmp/kernelwright-locks."""
    return os.environ.get(DIR_ENV) or LOCK_DIR


def prepare_dir(path: str | None = None) -> str:
    """Create the lock folder (default `lock_dir()`) and a lock file for every device of this
    host (called by the parent, which may be root, before any child runs). No sandboxed child
    sees the folder (sandbox.containment): only trusted processes take the locks."""
    path = path or lock_dir()
    try:
        os.makedirs(path, exist_ok=True)
        if os.stat(path).st_uid == os.geteuid():
            os.chmod(path, 0o755)
        for name in ["cpu", *(f"gpu-{uuid}" for uuid in host_gpu_uuids())]:
            for target in (os.path.join(path, f"{name}.lock"), os.path.join(path, f"{name}.turn")):
                if not os.path.exists(target):
                    fd = _open(target)
                    if fd is not None:
                        os.close(fd)
    except OSError:
        pass
    return path


def _normal_uuid(text: str) -> str:
    """nvidia-smi says GPU-0a1b..., torch says 0a1b...: one spelling for both."""
    text = text.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


@functools.lru_cache(maxsize=1)
def host_gpu_uuids() -> list[str]:
    """The UUIDs of this host's GPUs without initialising CUDA: the driver's /proc files, or
    nvidia-smi where a container hides them (both in PCI bus order)."""
    import glob
    import subprocess

    uuids = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):  # by PCI bus id
        try:
            for line in open(info):
                if line.startswith("GPU UUID:"):
                    uuids.append(_normal_uuid(line.split(":", 1)[1]))
        except OSError:
            continue
    if uuids:
        return uuids
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=pci.bus_id,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = sorted(line.split(",") for line in out.splitlines() if line.count(",") == 1)
    return [_normal_uuid(uuid) for _, uuid in rows]


def _open(path: str) -> int | None:
    # no O_CREAT on an existing file: with fs.protected_regular even root may not O_CREAT-open a
    # file that another uid owns in a sticky folder
    for _ in range(3):
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.fchmod(fd, 0o644)
            return fd
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


class DeviceLock:
    """acquire/release, or the shared() / exclusive() context managers. A lock without a file
    (name None, or a folder it cannot open) does nothing, and `available` says so: the
    evaluation then runs as before, unprotected. Not re-entrant: a nested request while held
    does nothing, except exclusive inside shared, which is refused."""

    def __init__(self, name: str | None, folder: str | None = None):
        folder = folder or lock_dir()
        self.path = None
        self._fd = None
        self._turn = None
        if name is not None:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "device"
            self.path = os.path.join(folder, f"{safe}.lock")
            self._fd = _open(self.path)
            self._turn = _open(os.path.join(folder, f"{safe}.turn")) if self._fd is not None else None
        self._held: int | None = None

    @property
    def available(self) -> bool:
        return self._fd is not None

    def acquire(self, exclusive: bool = False, on_wait: OnWait | None = None, deadline_s: float | None = None) -> bool:
        """Take the lock; False when nothing was taken (no file, or already held). `on_wait`:
        called with True when another process holds the lock, so this call waits for it, and
        with False once it is taken (the job page then says what it waits for). `deadline_s`:
        wait at most that many seconds, then raise LockTimeout (nothing held); None waits for
        as long as the holder holds it."""
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if self._held is not None:
            if self._held == fcntl.LOCK_SH and mode == fcntl.LOCK_EX:
                raise RuntimeError("DeviceLock: exclusive requested while holding it shared")
            return False
        if self._fd is None:
            return False
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        waited = False
        # the turnstile: every request passes it, and holds it while it waits for the lock, so a
        # request queues behind the one before it. flock(2) alone grants a shared hold while an
        # exclusive request waits: shared holds that overlapped (torch.compile warm-ups of several
        # evaluations, minutes each) kept every timed loop out (six shards on one GPU stalled)
        for fd, lock_mode, path in ((self._turn, fcntl.LOCK_EX, None), (self._fd, mode, self.path)):
            if fd is None or _flock(fd, lock_mode | fcntl.LOCK_NB):
                continue
            if on_wait is not None and not waited:
                on_wait(True)
            waited = True
            try:
                if deadline is None:
                    _flock(fd, lock_mode)
                else:
                    _flock_by(fd, lock_mode, deadline, path or self.path)
            except BaseException:
                if self._turn is not None:
                    fcntl.flock(self._turn, fcntl.LOCK_UN)
                raise
        if self._turn is not None:
            fcntl.flock(self._turn, fcntl.LOCK_UN)
        if waited and on_wait is not None:
            on_wait(False)
        self._held = mode
        return True

    def release(self) -> None:
        if self._held is not None and self._fd is not None:
            self._held = None
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release, and close the file (the lock does nothing from then on)."""
        self.release()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
        if self._turn is not None:
            fd, self._turn = self._turn, None
            os.close(fd)

    @contextlib.contextmanager
    def _hold(self, exclusive: bool, on_wait: OnWait | None, deadline_s: float | None) -> Iterator[None]:
        took = self.acquire(exclusive, on_wait, deadline_s)
        try:
            yield
        finally:
            if took:
                self.release()

    def shared(
        self, on_wait: OnWait | None = None, deadline_s: float | None = None
    ) -> contextlib.AbstractContextManager[None]:
        return self._hold(False, on_wait, deadline_s)

    def exclusive(
        self, on_wait: OnWait | None = None, deadline_s: float | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Held for the block; with `deadline_s`, LockTimeout when not free within that many seconds."""
        return self._hold(True, on_wait, deadline_s)


def _flock(fd: int, mode: int) -> bool:
    """flock(2), retried on EINTR; False when LOCK_NB found the lock taken."""
    while True:
        try:
            fcntl.flock(fd, mode)
            return True
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) and mode & fcntl.LOCK_NB:
                return False
            if exc.errno != errno.EINTR:
                raise


def _flock_by(fd: int, mode: int, deadline: float, path: str | None) -> None:
    """flock(2) retried without blocking until `deadline` (time.monotonic()); LockTimeout then."""
    pause = POLL_S[0]
    while not _flock(fd, mode | fcntl.LOCK_NB):
        left = deadline - time.monotonic()
        if left <= 0:
            kind = "exclusively" if mode & fcntl.LOCK_EX else "shared"
            raise LockTimeout(f"the device lock {path} could not be taken {kind} in time (another process holds it)")
        time.sleep(min(pause, left))
        pause = min(pause * 2, POLL_S[1])


def held_exclusively(name: str, folder: str | None = None) -> bool:
    """Whether some process holds the device's lock exclusively now (a timed loop runs): a
    probe that takes nothing (a shared try on a fresh open file, released at once). Read by the
    gpu worker while its evaluation is in a phase that needs the lock shared, to say the
    evaluation waits for the device."""
    lock = DeviceLock(name, folder)
    if lock._fd is None:
        return False
    try:
        free = _flock(lock._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        if free:
            fcntl.flock(lock._fd, fcntl.LOCK_UN)
        return not free
    finally:
        lock.close()  # the lock file and its turnstile: the gpu worker probes every few seconds


def device_lock_name(device: str) -> str:
    """The GPU's UUID (stable across CUDA_VISIBLE_DEVICES renumbering), or 'cpu'."""
    if device != "cuda":
        return "cpu"
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return (
        f"gpu-{_normal_uuid(str(uuid))}"
        if uuid
        else f"gpu-{os.environ.get('CUDA_VISIBLE_DEVICES', '')}-{torch.cuda.current_device()}"
    )


def host_lock_name(backend: str) -> str | None:
    """The lock name of this process's device without initialising CUDA: 'cpu', the host's only
    GPU when CUDA_VISIBLE_DEVICES is unset, or the GPU that CUDA_VISIBLE_DEVICES names alone (by
    UUID, or by index in PCI bus order, as nvidia-smi numbers them); None when that cannot be
    told (several GPUs visible, say)."""
    if backend != "cuda":
        return "cpu"
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        uuids = host_gpu_uuids()
        return f"gpu-{uuids[0]}" if len(uuids) == 1 else None
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if len(visible) != 1:
        return None
    if not visible[0].isdigit():
        return f"gpu-{_normal_uuid(visible[0])}"
    uuids = host_gpu_uuids()
    index = int(visible[0])
    return f"gpu-{uuids[index]}" if index < len(uuids) else None


NO_LOCK = DeviceLock(None)


def lock_from_env(device: str) -> DeviceLock:
    """The device's lock in the folder KW_LOCK_DIR names; no lock when none is named. A trusted
    process's (the analysis run in-process, a test): a sandboxed child is never told of the
    folder and could not open it (sandbox.isolation takes KW_LOCK_DIR out of its environment and
    its parent holds the lock for it, `ChildHold`)."""
    folder = os.environ.get("KW_LOCK_DIR")
    return DeviceLock(device_lock_name(device), folder) if folder else NO_LOCK


# What a child's message needs of its device, taken by its parent on its behalf (`ChildHold`):
# the commands that time hold it exclusively (the profiler's per-kernel times, the device
# ceilings: sandbox.worker), those of the paired window none (the parent holds the window
# exclusively itself, sandbox.protocol._Paired, and a shared request of its own would wait on
# it), every other message (set-up, trials, comparisons, timing sets and set-ups) shared.
EXCLUSIVE_COMMANDS = frozenset({"profile", "ceilings"})
UNLOCKED_COMMANDS = frozenset({"warm", "block", "exit"})
NO_REPLY_COMMANDS = frozenset({"exit"})


def command_mode(msg: Any) -> int | None:
    """LOCK_SH, LOCK_EX or None: what `msg`, sent to a child, needs of the device."""
    cmd = msg.get("cmd") if isinstance(msg, dict) else None
    if cmd in EXCLUSIVE_COMMANDS:
        return fcntl.LOCK_EX
    if cmd in UNLOCKED_COMMANDS:
        return None
    return fcntl.LOCK_SH


class ChildHold:
    """The device lock a trusted parent holds for one sandboxed child, which cannot open the
    lock itself: taken before a message that needs it is sent (`before_send`), released once
    the child has answered every command it was sent (`after_reply`) or is killed (`drop`).
    Messages without a "cmd" (a set-up) expect no reply of their own: the next reply ends them.
    So a child holds the device only while it works for its parent, at most until the parent's
    deadline for its answer, and an idle or hostile child holds nothing: the parent's own
    timing window (exclusive) never waits for a child of its own."""

    def __init__(self, name: str | None, folder: str | None = None):
        self.lock = DeviceLock(name, folder) if name else NO_LOCK
        self.pending = 0  # commands sent and not answered yet

    @property
    def available(self) -> bool:
        return self.lock.available

    @property
    def held(self) -> int | None:
        return self.lock._held

    def before_send(self, msg: Any, deadline: float) -> None:
        """Take what `msg` needs, waiting at most until `deadline` (time.monotonic()): LockTimeout
        then, with nothing sent to wait for."""
        mode = command_mode(msg)
        if mode is not None and self.lock.available and self.lock._held != mode and self.lock._held != fcntl.LOCK_EX:
            self.lock.release()  # shared -> exclusive: never asked for while commands are pending
            self.lock.acquire(mode == fcntl.LOCK_EX, deadline_s=max(0.0, deadline - time.monotonic()))
        cmd = msg.get("cmd") if isinstance(msg, dict) else None
        if cmd is not None and cmd not in NO_REPLY_COMMANDS:
            self.pending += 1

    def after_reply(self) -> None:
        self.pending = max(0, self.pending - 1)
        if not self.pending:
            self.lock.release()

    def drop(self) -> None:
        self.pending = 0
        self.lock.release()

    def close(self) -> None:
        self.pending = 0
        self.lock.close()


def timed_windows(result: dict) -> list[tuple[str, str, float, float]]:
    """(device_id, which, start, end) of each timing run an evaluation result (EvalResult.to_dict())
    records: the candidate's always, eager and torch.compile only when measured in that
    evaluation (a cached baseline's window belongs to the evaluation that measured it)."""
    timing = result.get("timing") or {}
    which = ["candidate"] + ([] if timing.get("baseline_cached") else ["eager", "compile"])
    out = []
    for name in which:
        w = (timing.get(name) or {}).get("window")
        if w and len(w) == 2:
            out.append((result.get("device_id", ""), name, float(w[0]), float(w[1])))
    return out


def overlapping_windows(results: list[dict]) -> list[tuple[tuple, tuple]]:
    """Pairs of timing runs that overlapped in time on one device: empty when the device lock
    did its job (evaluations may share a GPU, their timed loops may not)."""
    windows = sorted((w for r in results for w in timed_windows(r)), key=lambda w: (w[0], w[2]))
    bad = []
    for i, a in enumerate(windows):
        for b in windows[i + 1 :]:
            if b[0] != a[0] or b[2] >= a[3]:
                break
            bad.append((a, b))
    return bad
