"""A host-wide share of a GPU's memory for each evaluation, so evaluations that share one GPU do
not run each other out of memory.

Why: five KernelBench evaluations on one H200 (level 1 at published sizes: 6 GiB inputs, one
evaluation holding 30-60 GiB) ran out of device memory in 11 of 27 problems, the reference as
often as the candidate (docs/benchmarks.md, thirteenth session). The device lock (sandbox.devlock)
keeps timed loops apart; it says nothing about memory.

How: a GPU's memory is cut into PARTS parts, each one file under MEM_DIR, and an
evaluation's parent holds its parts with flock(2) for as long as its children live (the folder
is the parents' alone: a candidate cannot take parts to hold other evaluations up). The kernel
drops the locks when the holder dies, so a crashed evaluation frees its share with no clean-up.
One more file, `admit`, serialises admissions: the parent holds it while its reference builds
the model and runs the first forward (no share is known yet), then while it waits for the parts
its measured footprint needs (`footprint`). A waiter holds `admit`, so later evaluations queue
behind it and a large request is not starved by a stream of small ones; a holder of parts never
asks for more, so nothing deadlocks. Processes outside Kernelwright are not covered; an estimate
that falls short is what `evaluate`'s retry with the whole device answers.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import time
from collections.abc import Callable

from .devlock import _flock, _open

MEM_DIR = "/tmp/kernelwright-memory"  # not the lock folder: no child sees these files (containment)
PARTS = 64
SETUP_PARTS = PARTS // 8  # free before a reference may build its model and run the first forward
CONTEXT_BYTES = 1 << 30  # one CUDA context with cuBLAS/cuDNN workspaces, per child
POLL_S = 0.25
OnWait = Callable[[bool], None]  # True: waiting for other evaluations' memory; False: admitted


def folder_for(device_id: str, folder: str = MEM_DIR) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device_id) or "device"
    return os.path.join(folder, f"{safe}.mem")


def prepare(device_id: str, folder: str = MEM_DIR) -> str | None:
    """The device's part files (made by a parent; children never see them). None when they
    cannot be made (a lock folder another user owns): the evaluation then runs without a share."""
    path = folder_for(device_id, folder)
    try:
        os.makedirs(path, exist_ok=True)
        for name in ["admit", *(f"{k:02d}" for k in range(PARTS))]:
            fd = _open(os.path.join(path, name))
            if fd is None:
                return None
            os.close(fd)
    except OSError:
        return None
    return path


def footprint(peak: int, roofline: dict, input_sets: int) -> int:
    """Bytes one evaluation may hold on the device at once, from what the reference measured in
    its set-up: `peak` (the model, one input set and the first forward's peak) and the roofline
    counts (one set's `input_bytes` and `output_bytes`). The reference keeps the timing sets, a
    trial in flight and its float64 copy (about twice the peak); the candidate keeps its copies of
    the sets and runs its own forward; torch.compile's first call may allocate a peak of its own."""
    inputs, outputs = int(roofline["input_bytes"]), int(roofline["output_bytes"])
    reference = peak + input_sets * inputs + (inputs + outputs) + 2 * peak + peak
    candidate = peak + input_sets * inputs + (inputs + outputs)
    return reference + candidate + 2 * CONTEXT_BYTES


def input_sets_that_fit(peak: int, roofline: dict, wanted: int, total: int) -> int:
    """The most timing input sets, at most `wanted`, whose footprint fits a `total`-byte device;
    never fewer than two (the timed loop exchanges sets between calls, so a forward that keys a
    cached output on its input's address returns a stale one), nor more than asked. A task of
    4 GiB tensors ran out of memory on an 80 GB H100 holding the whole device with three sets
    (2026-12-06): the reference and the candidate each keep every set."""
    n = wanted
    while n > 2 and footprint(peak, roofline, n) > total:
        n -= 1
    return n


def parts_for(nbytes: int, total: int) -> int:
    """Parts of a `total`-byte device that cover `nbytes`: at least 1, at most all of them."""
    if total <= 0:
        return PARTS
    return max(1, min(PARTS, math.ceil(nbytes * PARTS / total)))


class MemoryShare:
    """The parts one evaluation holds. A share without files (no device, or a folder it cannot
    use) does nothing and says so (`available`)."""

    def __init__(self, folder: str = MEM_DIR, whole: bool = False):
        self.folder, self.whole = folder, whole  # whole: every part, whatever the footprint
        self.path: str | None = None
        self._admit: int | None = None
        self._held: list[int] = []

    def open(self, device_id: str | None) -> MemoryShare:
        """Use `device_id`'s parts (once; a later call with another device does nothing)."""
        if self.path is None and device_id:
            self.path = prepare(device_id, self.folder)
        return self

    @property
    def available(self) -> bool:
        return self.path is not None

    @property
    def parts(self) -> int:
        return len(self._held)

    def admit(self, on_wait: OnWait | None = None) -> None:
        """Take the admission file, then wait until SETUP_PARTS parts are free (not held)."""
        if self.path is None or self._admit is not None:
            return
        fd = _open(os.path.join(self.path, "admit"))
        if fd is None:
            self.path = None
            return
        self._admit = fd
        if not _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB):
            self._waiting(on_wait, lambda: _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))
        self._waiting(on_wait, lambda: self.free() >= SETUP_PARTS)

    def take(self, parts: int, on_wait: OnWait | None = None) -> None:
        """Hold `parts` parts (waiting for other evaluations to finish), then let the next
        evaluation in. Called once, after `admit`."""
        if self.path is None:
            return
        parts = max(1, min(PARTS, parts))
        self._waiting(on_wait, lambda: self._try_take(parts))
        self._close_admit()

    def take_now(self, parts: int) -> bool:
        """Hold `parts` parts only if they can be had at once: no evaluation is being admitted or
        waiting for memory, and that many are free. For work that can do without the device (the
        analysis's eager profile) rather than queue behind an evaluation's wait."""
        if self.path is None:
            return False
        fd = _open(os.path.join(self.path, "admit"))
        if fd is None:
            return False
        try:
            return _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB) and self._try_take(max(1, min(PARTS, parts)))
        finally:
            os.close(fd)

    def release(self) -> None:
        self._close_admit()
        for fd in self._held:
            os.close(fd)
        self._held = []

    def free(self) -> int:
        """Parts no evaluation holds now (a probe that keeps nothing)."""
        got = self._lock_free(PARTS)
        for fd in got:
            os.close(fd)
        return len(got)

    def _try_take(self, parts: int) -> bool:
        got = self._lock_free(parts)
        if len(got) < parts:
            for fd in got:
                os.close(fd)
            return False
        self._held = got
        return True

    def _lock_free(self, limit: int) -> list[int]:
        got: list[int] = []
        for k in range(PARTS):
            if len(got) >= limit:
                break
            fd = _open(os.path.join(self.path or "", f"{k:02d}"))
            if fd is None:
                continue
            if _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB):
                got.append(fd)
            else:
                os.close(fd)
        return got

    def _waiting(self, on_wait: OnWait | None, ready: Callable[[], bool]) -> None:
        if ready():
            return
        if on_wait is not None:
            on_wait(True)
        while not ready():
            time.sleep(POLL_S)
        if on_wait is not None:
            on_wait(False)

    def _close_admit(self) -> None:
        if self._admit is not None:
            os.close(self._admit)
            self._admit = None


# torch's words (OutOfMemoryError, "CUDA error: out of memory") and the driver API's
OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)


def out_of_memory(texts: list[str]) -> bool:
    """Whether a failure's messages say the device ran out of memory."""
    return any(OUT_OF_MEMORY.search(t or "") for t in texts)
