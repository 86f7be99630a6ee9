"""The timed calls' checks beyond fingerprints (sandbox.timed_checks), piece by piece; the hack
candidates identity_memo, pointer_memo and fingerprint_slack run them end to end."""

from __future__ import annotations

import torch

from sandbox import timed_checks
from sandbox.timed_checks import Exchange, HeldMemory, SpotSample


def test_an_output_returned_again_while_the_first_is_alive_is_counted():
    held = HeldMemory()
    a = torch.randn(4, 4)
    held.add([a, a[1]])  # one call's outputs may share memory
    held.add([torch.randn(4, 4)])
    assert held.repeats == 0
    held.add([a])  # the first call's output, still alive, returned again
    held.add([a[2:]])  # a view of it
    assert held.repeats == 2


def test_memory_freed_by_an_earlier_output_may_be_reused():
    held = HeldMemory()
    held.add([torch.randn(256, 256)])  # dropped at once: its memory may come back
    for _ in range(20):
        held.add([torch.randn(256, 256)])
    assert held.repeats == 0


def test_the_spot_sample_keeps_copies_of_a_few_outputs_from_anywhere_in_the_window():
    late = 0
    for _ in range(200):
        spots = SpotSample(budget_bytes=1 << 20)
        outs = [torch.full((8,), float(k)) for k in range(30)]
        for k, out in enumerate(outs):
            spots.offer(k % 3, None, [out])
        assert len(spots.kept) == timed_checks.SPOT_CHECKS
        for entry in spots.kept:
            value = int(entry["outputs"][0][0])
            assert entry["set"] == value % 3
            assert entry["outputs"][0].data_ptr() != outs[value].data_ptr()  # a copy
            late += value >= 15
    assert 200 < late < 400  # reservoir sampling: about half of the 600 kept come from the second half


def test_the_spot_sample_keeps_one_output_that_alone_passes_its_budget():
    spots = SpotSample(budget_bytes=16)
    for _ in range(5):
        spots.offer(0, None, [torch.zeros(64)])
    assert len(spots.kept) == 1


def test_a_replaced_spot_copy_is_dropped_before_its_replacement_is_made(monkeypatch):
    """One slot for a large output: each later copy is made after the last one is gone (holding
    both ran a 6 GiB task's candidate out of device memory sooner)."""
    import weakref

    monkeypatch.setattr(timed_checks, "_below", lambda n: 0)  # every offer replaces slot 0
    spots = SpotSample(budget_bytes=16)
    copies: list = []
    alive_at_clone: list[int] = []
    original = torch.Tensor.clone

    def clone(self, *args, **kwargs):
        alive_at_clone.append(sum(ref() is not None for ref in copies))
        out = original(self, *args, **kwargs)
        copies.append(weakref.ref(out))
        return out

    monkeypatch.setattr(torch.Tensor, "clone", clone)
    for k in range(4):
        spots.offer(0, None, [torch.full((64,), float(k))])
    assert alive_at_clone == [0, 0, 0, 0] and float(spots.kept[0]["outputs"][0][0]) == 3.0


def test_an_exchange_puts_another_sets_values_in_and_back_and_versions_say_nothing():
    sets = [[torch.full((3, 5), float(n)), n] for n in range(3)]
    exchange = Exchange(sets)
    swapped, last, steps = 0, {}, set()
    for n in range(300):
        j = n % 3
        i = exchange.before(j)
        assert float(sets[j][0][0, 0]) == i and sets[j][1] == j  # values of set i; plain values stay
        version = sets[j][0]._version
        if j in last:
            steps.add(version - last[j])
        last[j] = version
        exchange.after(j, i)
        swapped += i != j
        assert [float(s[0][0, 0]) for s in sets] == [0.0, 1.0, 2.0]
    assert 30 < swapped < 150  # about one call in SWAP_EVERY
    assert len(steps) == 1  # the same version step whether a call's values were exchanged or not


def test_a_large_input_is_exchanged_in_chunks(monkeypatch):
    monkeypatch.setattr(timed_checks, "EXCHANGE_CHUNK", 7)
    a, b = torch.arange(30.0).reshape(5, 6), torch.arange(30.0).reshape(5, 6) + 100
    a0, b0 = a.clone(), b.clone()
    timed_checks._exchange([a], [b])
    assert torch.equal(a, b0) and torch.equal(b, a0)
    timed_checks._exchange([a.t()], [b.t()])  # not contiguous: swapped whole
    assert torch.equal(a, a0) and torch.equal(b, b0)


def test_tensors_in_lists_and_dicts_are_exchanged_all_or_none():
    """A feature pyramid's list of maps, a batch dict: every tensor of the set moves with the
    others (half an exchange would put a call on values no set's expected output describes)."""
    sets = [
        [[torch.full((2,), float(n)), torch.full((3,), float(n))], {"m": torch.full((4,), float(n))}] for n in range(2)
    ]
    assert timed_checks._exchange(sets[0], sets[1])
    assert [float(t[0]) for t in timed_checks._tensors(sets[0])] == [1.0, 1.0, 1.0]
    assert [float(t[0]) for t in timed_checks._tensors(sets[1])] == [0.0, 0.0, 0.0]
    unlike = [[torch.zeros(2), torch.zeros(3)], {"m": torch.zeros(5)}]  # one shape differs: none moves
    assert not timed_checks._exchange(sets[0], unlike)
    assert float(sets[0][1]["m"][0]) == 1.0 and float(unlike[1]["m"][0]) == 0.0


def test_a_remembered_storage_in_a_new_tensor_object_is_counted():
    """The red team's memo_pool: a fresh tensor made with set_() over a storage the memo keeps
    dies with the timer's batch, while the memory stays held; ownership follows the storage."""
    held = HeldMemory()
    ring = [torch.randn(8, 8).untyped_storage()]
    held.add([torch.empty(0).set_(ring[0], 0, (8, 8), (8, 1))])  # the tensor object dies here
    held.add([torch.empty(0).set_(ring[0], 0, (8, 8), (8, 1))])
    assert held.repeats == 1


def test_a_fault_handler_installed_after_the_baseline_is_seen():
    """SigCgt is the kernel's record: a handler installed natively is in it as a Python one is
    (lazy_fault's native sigaction finishes outputs when the harness first reads them). In a
    process of its own: pytest's faulthandler catches both signals already."""
    import subprocess
    import sys

    code = (
        "import signal\n"
        "from sandbox.timed_checks import FaultWatch, caught_faults\n"
        "base = caught_faults(); watch = FaultWatch(base)\n"
        "first = watch.check()\n"
        "old = signal.signal(signal.SIGBUS, lambda *a: None)\n"
        "second = watch.check()\n"
        "signal.signal(signal.SIGBUS, old)\n"
        "print(base, first, second, watch.check(), watch.seen)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False", "True", "False", "1"], out


def test_a_fault_mask_that_can_no_longer_be_read_counts(monkeypatch):
    """Fail closed: a kernel that used up the file descriptors must not turn the check off."""
    from sandbox import timed_checks

    watch = timed_checks.FaultWatch(0)
    monkeypatch.setattr(timed_checks, "caught_faults", lambda: -1)
    assert watch.check() and watch.seen == 1
    assert not timed_checks.FaultWatch(-1).check()  # the baselines' watch: never judged


def test_outputs_with_work_attached_or_foreign_memory_are_counted():
    import weakref

    import numpy as np
    import torch

    from sandbox.timed_checks import HeldMemory

    held = HeldMemory()
    held.add([torch.randn(8), torch.relu(torch.randn(4, 4))])
    assert (held.attached, held.foreign, held.repeats) == (0, 0, 0)
    finalized = torch.randn(8)
    weakref.finalize(finalized, print, "ahead")
    held.add([finalized])
    assert held.attached == 1
    tagged = torch.randn(8)
    tagged.memo = 1  # attributes of its own
    held.add([tagged])
    assert held.attached == 2
    held.add([torch.from_numpy(np.zeros(8, dtype=np.float32))])
    assert held.foreign == 1
