"""The host-wide share of device memory (sandbox.devmem): parts held by flock in one process are
refused to another, freed when the holder dies, and waiters queue behind the admission file.
The holders here are separate processes, as evaluations' parents are."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
from pathlib import Path

from sandbox import devmem

REPO = Path(__file__).resolve().parents[2]


def _hold(folder: str, parts: int, ready, go) -> None:
    share = devmem.MemoryShare(folder).open("gpu-test")
    share.admit()
    share.take(parts)
    ready.set()
    go.wait(60)
    share.release()


def _holder(folder: str, parts: int):
    ctx = mp.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(folder, parts, ready, go))
    proc.start()
    assert ready.wait(30), "the holder took its parts"
    return proc, go


def test_parts_held_elsewhere_are_not_free(tmp_path):
    proc, go = _holder(str(tmp_path), 40)
    try:
        share = devmem.MemoryShare(str(tmp_path)).open("gpu-test")
        assert share.available
        assert share.free() == devmem.PARTS - 40
    finally:
        go.set()
        proc.join(30)
    assert share.free() == devmem.PARTS


def test_a_share_waits_for_the_holder_and_says_so(tmp_path):
    """B asks for more than is free: it reports a wait and gets its parts only after A let go."""
    proc, go = _holder(str(tmp_path), 40)
    events: list[tuple[bool, bool]] = []  # (waiting, the holder still alive)

    def on_wait(waiting: bool) -> None:
        events.append((waiting, proc.is_alive()))
        if waiting:
            go.set()  # A releases only once B has said it waits

    share = devmem.MemoryShare(str(tmp_path)).open("gpu-test")
    try:
        share.admit(on_wait)
        share.take(30, on_wait)
        assert share.parts == 30
        assert events[0] == (True, True), events
        assert events[-1][0] is False, events
        proc.join(30)
        assert share.free() == devmem.PARTS - 30
    finally:
        share.release()
        go.set()
        proc.join(30)


def test_a_killed_holder_frees_its_parts(tmp_path):
    proc, go = _holder(str(tmp_path), devmem.PARTS)
    share = devmem.MemoryShare(str(tmp_path)).open("gpu-test")
    assert share.free() == 0
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    share.admit()
    share.take(devmem.PARTS)
    assert share.parts == devmem.PARTS
    share.release()


_LATER = """
import sys
from sandbox import devmem
share = devmem.MemoryShare(sys.argv[1]).open("gpu-test")
share.admit()
open(sys.argv[2], "a").write("admitted\\n")
share.take(1)
share.release()
"""


def test_a_waiter_keeps_later_evaluations_out(tmp_path):
    """While one evaluation waits for parts (holding the admission file), a later one is not
    admitted, even for a single part: a large request is not starved by small ones. (The later
    one is a fresh process: a forked one would share this one's open lock files.)"""
    proc, go = _holder(str(tmp_path), devmem.PARTS - devmem.SETUP_PARTS)
    big = devmem.MemoryShare(str(tmp_path)).open("gpu-test")
    order = tmp_path / "order"
    order.write_text("")
    later: list[subprocess.Popen] = []

    def on_wait(waiting: bool) -> None:
        if waiting and not later:
            later.append(subprocess.Popen([sys.executable, "-c", _LATER, str(tmp_path), str(order)], cwd=REPO))
            go.set()

    try:
        big.admit()
        big.take(devmem.PARTS, on_wait)
        with open(order, "a") as f:
            f.write("big took its parts\n")
        big.release()
        assert later and later[0].wait(60) == 0
        assert order.read_text().splitlines() == ["big took its parts", "admitted"]
    finally:
        big.release()
        go.set()
        proc.join(30)


def _admitting(folder: str, ready, go) -> None:
    share = devmem.MemoryShare(folder).open("gpu-test")
    share.admit()  # holds the admission file, as an evaluation waiting for its parts does
    ready.set()
    go.wait(60)
    share.release()


def test_take_now_holds_free_parts_and_never_waits(tmp_path):
    """The analysis's profile takes a set-up's parts only if they are free at once: beside a
    holder of 40 of 64 it gets 8, not 30 (and then holds none); behind an evaluation being
    admitted it gets none although every part is free."""
    proc, go = _holder(str(tmp_path), 40)
    share = devmem.MemoryShare(str(tmp_path)).open("gpu-test")
    try:
        assert share.take_now(30) is False and share.parts == 0
        assert share.take_now(devmem.SETUP_PARTS) is True and share.parts == devmem.SETUP_PARTS
        share.release()
    finally:
        go.set()
        proc.join(30)
    ctx = mp.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    waiter = ctx.Process(target=_admitting, args=(str(tmp_path), ready, go))
    waiter.start()
    try:
        assert ready.wait(30)
        assert share.free() == devmem.PARTS
        assert share.take_now(1) is False and share.parts == 0
    finally:
        go.set()
        waiter.join(30)
    assert share.take_now(1) is True
    share.release()


def test_a_published_size_elementwise_task_needs_most_of_an_h200():
    """KernelBench's tanh at published sizes (6 GiB in, 6 GiB out): two cannot share an H200."""
    gib = 1 << 30
    h200 = 140 * gib
    need = devmem.footprint(12 * gib, {"input_bytes": 6 * gib, "output_bytes": 6 * gib}, input_sets=3)
    assert devmem.parts_for(need, h200) > devmem.PARTS // 2
    small = devmem.footprint(64 << 20, {"input_bytes": 16 << 20, "output_bytes": 16 << 20}, input_sets=3)
    assert devmem.parts_for(small, h200) <= 2  # dozens of small evaluations share one GPU


def test_a_task_of_large_tensors_is_timed_on_fewer_sets_but_never_one():
    """The H100 run of 2026-12-06: 4 GiB in, 4 GiB out ran out of an 80 GB card holding all of
    it with three sets in each child; two fit. Small tasks keep every set asked for."""
    gib = 1 << 30
    big = {"input_bytes": 4 * gib, "output_bytes": 4 * gib}
    assert devmem.footprint(8 * gib, big, input_sets=3) > 79 * gib
    assert devmem.input_sets_that_fit(8 * gib, big, 3, 79 * gib) == 2
    assert devmem.input_sets_that_fit(8 * gib, big, 3, 8 * gib) == 2  # fits nowhere: still two
    assert devmem.input_sets_that_fit(8 * gib, big, 1, 79 * gib) == 1  # never more than asked
    small = {"input_bytes": 16 << 20, "output_bytes": 16 << 20}
    assert devmem.input_sets_that_fit(64 << 20, small, 3, 79 * gib) == 3
    assert devmem.input_sets_that_fit(64 << 20, small, 5, 79 * gib) == 5


def test_out_of_memory_reads_torch_words():
    assert devmem.out_of_memory(["task: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB."])
    assert devmem.out_of_memory(["the task failed: AcceleratorError: CUDA error: out of memory"])
    assert devmem.out_of_memory(["cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY"])
    assert not devmem.out_of_memory(["candidate: outputs differ at 3 of 4096 elements"])


def test_a_folder_it_cannot_use_leaves_no_share(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    share = devmem.MemoryShare(str(blocker)).open("gpu-test")
    assert not share.available
    share.admit()
    share.take(3)
    assert share.parts == 0


def test_an_evaluation_takes_its_set_count_from_what_the_reference_measured():
    from sandbox import EvalOptions
    from sandbox.protocol import _input_sets

    gib = 1 << 30
    big = {
        "memory": {"peak": 8 * gib, "total": 79 * gib},
        "roofline": {"input_bytes": 4 * gib, "output_bytes": 4 * gib},
    }
    assert _input_sets(big, EvalOptions(input_sets=3)) == 2
    assert _input_sets({"roofline": big["roofline"]}, EvalOptions(input_sets=3)) == 3  # cpu: no memory measured
