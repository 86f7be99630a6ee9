"""What the timed calls are held to beyond their fingerprints, in the process that times them.

A fingerprint (harness.fingerprint) admits any output within tolerance of every element, and
the trials' stricter rules (constant, near zero: sandbox.compare) ran on trials only, so a
forward that could tell a timed call from a trial could return cheaper outputs there: a
constant where every value of the task is below its atol passed 2026-12-06. And the timing sets
are the same tensors call after call, so a memo keyed on the input tensors (or their pointers and
version counters) passed every fingerprint, being correct without computing. Three checks:

- HeldMemory: memory returned by a timed call while the storage an earlier call returned it in
  is still alive. Outputs of one call may share memory (views of one result); an honest
  forward's outputs of different calls cannot while the earlier one's storage is held (the timer
  holds up to timing.HOLD_CALLS outputs; a memo holds its own storages, whatever tensor objects
  it wraps them in).
- SpotSample: full copies of a few timed outputs, chosen by reservoir sampling from the OS's
  entropy after each call has returned, for the reference to compare as a trial's
  (worker._RefContext.spot_compare). The candidate cannot know which of its outputs are kept.
- Exchange: about one timed call in SWAP_EVERY (drawn from the OS's entropy) runs on another
  timing set's values, copied into its own set's tensors just before the call and back after it;
  its fingerprint is checked against that set. Every timed call's input tensors get a fresh
  version counter (one clock for all sets), so neither a pointer nor a version says which
  values a call holds: a memo must read the inputs to know (docs/evaluation.md, known limits).
  The baselines run the same exchanges (timing.Timer.block), so both sides pay the same copies.

All of it runs outside the timed region.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

# bound when the harness imports, before any candidate code runs
_urandom = os.urandom

SPOT_CHECKS = 3  # timed outputs compared in full per window
SWAP_EVERY = 4  # on average one timed call in this many runs on another set's values


def _below(n: int) -> int:
    """A uniform integer in [0, n) from the OS's entropy."""
    return int.from_bytes(_urandom(8), "little") % n


class HeldMemory:
    """Counts timed calls that returned memory an earlier call's live output owns."""

    def __init__(self) -> None:
        self.owner: dict[int, tuple[int, weakref.ref]] = {}
        self.calls = 0
        self.repeats = 0
        self.foreign = 0  # calls that returned memory torch's allocator does not own
        self.attached = 0  # calls that returned an output with work attached to its release

    def add(self, leaves: list[Any]) -> None:
        import torch

        self.calls += 1
        repeated = False
        for x in leaves:
            if type(x) is not torch.Tensor or x.numel() == 0:
                continue
            if _attached(x):
                self.attached += 1
            if foreign(x):
                self.foreign += 1
                continue
            ptr = x.untyped_storage().data_ptr()
            if ptr == 0:
                continue
            seen = self.owner.get(ptr)
            if seen is not None and seen[0] != self.calls and seen[1]() is not None:
                repeated = True
            # the storage, not the tensor object: torch keeps a storage's Python object for as
            # long as the memory is held, while a tensor made with set_() over a remembered
            # storage is a new object that dies young (red team 2026-12-06: memo_pool)
            self.owner[ptr] = (self.calls, weakref.ref(x.untyped_storage()))
        self.repeats += repeated


_FAULT_BITS = (1 << (11 - 1)) | (1 << (7 - 1))  # SIGSEGV, SIGBUS in /proc/<pid>/status masks
FAULT_HANDLER_WHY = (
    "a handler for SIGSEGV or SIGBUS was installed when the outputs were read (an output finished by a "
    "fault handler when first read is computed outside the call)"
)


def caught_faults() -> int:
    """Which of SIGSEGV and SIGBUS this process catches (the SigCgt mask of /proc/self/status:
    the kernel's own record, which a handler installed with native sigaction is in, while
    Python's signal.getsignal sees only Python's). An output whose pages were left inaccessible
    and finished by such a handler when the harness first reads them (red team 2026-12-07,
    lazy_fault, 2.3-2.8x for a 0.6x kernel) needs one installed at that read. -1 if unreadable."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"SigCgt:"):
                    return int(line.split()[1], 16) & _FAULT_BITS
    except (OSError, ValueError, IndexError):
        pass
    return -1


class FaultWatch:
    """Counts the moments, just before the harness reads outputs, when the process catches a
    fault signal it did not catch before the candidate was imported (`base`)."""

    def __init__(self, base: int):
        self.base = base
        self.seen = 0

    def check(self) -> bool:
        """Also true where the mask was readable at the start and is not now (a kernel that used
        up the process's file descriptors would turn the check off otherwise)."""
        now = caught_faults()
        changed = self.base >= 0 and (now < 0 or now & ~self.base != 0)
        self.seen += changed
        return changed


FOREIGN_WHY = (
    "memory torch's allocator does not own (from_numpy, frombuffer, from_blob or a .numpy() view): outputs "
    "must be fresh tensors from torch's allocator"
)


def foreign(x: Any) -> bool:
    """An output over memory torch's allocator does not own: its storage is not resizable. Such a
    storage object dies while its memory lives on, so a weak reference to it proves nothing
    (red team 2026-12-07: numpy_ring_memo, 71-128x on a matmul)."""
    return not x.untyped_storage().resizable()


def _attached(x: Any) -> bool:
    """Whether an output carries something that runs or is kept when the harness lets it go: a
    weak reference (a weakref.finalize computing the next call's output ahead, outside the timed
    call; red team 2026-12-07: finalizer_precompute, 4.1-5.3x for a 0.6x kernel) on the tensor, its
    base or its storage, or attributes of its own. An honest output has none: it is checked
    before HeldMemory takes its own weak reference to the storage."""
    import weakref

    for obj in (x, x._base, x.untyped_storage()):
        if obj is not None and weakref.getweakrefcount(obj):
            return True
    return bool(getattr(x, "__dict__", None))


class SpotSample:
    """Up to SPOT_CHECKS copies of timed outputs (fewer where they would pass `budget_bytes`,
    never none), each with its timing set's index and the output's structure."""

    def __init__(self, budget_bytes: int, size: int = SPOT_CHECKS):
        self.budget, self.size = budget_bytes, size
        self.kept: list[dict[str, Any]] = []
        self.seen = 0

    def offer(self, k: int, spec: Any, leaves: list[Any]) -> None:
        import torch

        self.seen += 1
        nbytes = sum(int(x.nbytes) for x in leaves if isinstance(x, torch.Tensor))
        size = max(1, min(self.size, self.budget // max(1, nbytes)))
        slot = len(self.kept) if len(self.kept) < size else _below(self.seen)
        if slot >= size:
            return
        if slot < len(self.kept):  # the copy it replaces goes first: a 6 GiB output is not held twice
            del self.kept[slot]
        entry = {
            "set": k,
            "spec": spec,
            "outputs": [x.detach().clone() if type(x) is torch.Tensor else x for x in leaves],
        }
        self.kept.insert(slot, entry)


EXCHANGE_CHUNK = 1 << 24  # elements swapped at a time: a GB-sized input needs no GB-sized temporary


def _swap(x: Any, y: Any) -> None:
    if not (x.is_contiguous() and y.is_contiguous()):
        held = x.clone()
        x.copy_(y)
        y.copy_(held)
        return
    xf, yf = x.view(-1), y.view(-1)
    for start in range(0, xf.numel(), EXCHANGE_CHUNK):
        part = slice(start, start + EXCHANGE_CHUNK)
        held = xf[part].clone()
        xf[part].copy_(yf[part])
        yf[part].copy_(held)


def _tensors(x: Any) -> list[Any]:
    """Every tensor of one input set, in order, through lists, tuples and dicts."""
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _exchange(a: list[Any], b: list[Any]) -> bool:
    """Swaps the values of two timing sets' tensors in place; only where every tensor of one has
    its like (shape, dtype) at the same place in the other: half an exchange would leave a call on
    values that no set's expected output describes. Returns whether it swapped."""
    xs, ys = _tensors(a), _tensors(b)
    if len(xs) != len(ys) or any(x.shape != y.shape or x.dtype != y.dtype for x, y in zip(xs, ys, strict=True)):
        return False
    if any(x is y for x, y in zip(xs, ys, strict=True)):
        return False
    for x, y in zip(xs, ys, strict=True):
        _swap(x, y)
    return True


class Exchange:
    """The timing sets of one process, whose values a timed call may find exchanged."""

    def __init__(self, sets: list[list[Any]]):
        self.sets = sets
        self.clock = 0

    def before(self, j: int) -> int:
        """Set j's tensors, about to be called: maybe another set's values put in, and a fresh
        version counter. Returns the set whose values they now hold."""
        k, i = len(self.sets), j
        if k > 1 and _below(SWAP_EVERY) == 0:
            other = (j + 1 + _below(k - 1)) % k
            if _exchange(self.sets[j], self.sets[other]):
                i = other
        self._stamp(self.sets[j])
        return i

    def after(self, j: int, i: int) -> None:
        if i != j:
            _exchange(self.sets[j], self.sets[i])

    def _stamp(self, inputs: list[Any]) -> None:
        import torch

        tensors = tuple(_tensors(inputs))
        if not tensors:
            return
        self.clock += 1 << 8  # above any count of in-place writes between two calls
        versions = tuple(self.clock for _ in tensors)
        try:
            torch._C._autograd._unsafe_set_version_counter(tensors, versions)
        except (AttributeError, TypeError, RuntimeError):  # a torch without it: bump, at least
            from torch.autograd.graph import increment_version

            for x in tensors:
                increment_version(x)
