"""Tensors of hundreds of MB evaluate on the CPU backend (they cross no pipe), a forward that
writes to its input dies on the read-only mapping, and the candidate's process never holds the
reference's expected outputs (sandbox.shared, docs/evaluation.md sections 3-6)."""

from __future__ import annotations

import warnings

import pytest

from sandbox import evaluate, protocol

SWISH = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


batch_size = {rows}
dim = {cols}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def _honest(task: str) -> dict[str, str]:
    return {"model_new.py": task.replace("class Model(", "class ModelNew(")}


@pytest.mark.slow
def test_a_400_mb_task_evaluates_on_the_cpu_backend(quick):
    """KernelBench level 1 problem 25 (Swish) at 2048 x 49152 fp32: 403 MB per tensor; the
    shape trials and the timing sets included (before sealed memfds such sizes went through the
    pipes three times per tensor; at 4096 x 393216 the message limit refused them)."""
    task = SWISH.format(rows=2048, cols=49152)
    res = evaluate(task, _honest(task), quick(torch_ops="allow", timing_rounds=3, input_sets=2, eval_timeout_s=600))
    assert res.status.value == "ok", res.reasons
    assert all(t.passed for t in res.trials) and len(res.trials) >= 6
    transport = next(f for f in res.audit.findings if f.startswith("transport:"))
    assert " 0." in transport.split("MB through")[0]  # well under 1 MB through the sockets


def test_a_forward_that_writes_to_its_input_faults(quick):
    task = SWISH.format(rows=256, cols=256)  # 256 KB: by memfd
    files = {
        "model_new.py": task.replace("class Model(", "class ModelNew(").replace(
            "return x * torch.sigmoid(x)", "x.mul_(torch.sigmoid(x))\n        return x.clone()"
        )
    }
    res = evaluate(task, files, quick(torch_ops="allow"))
    assert res.status.value == "runtime_error", res.reasons
    assert "SIGSEGV" in res.reasons[0] and "mapped read-only" in res.reasons[0]


SPY = '''import ctypes
import gc
import mmap
import os

import torch
import torch.nn as nn


def expected_reachable(out):
    """Any tensor equal to `out` (other than itself), or any readable descriptor whose bytes hold
    out's first 4 KB: where an expected output would be if it had reached this process."""
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj is not out and obj.shape == out.shape and obj.dtype == out.dtype:
            if torch.equal(obj, out):
                return True
    head = ctypes.string_at(out.data_ptr(), 4096)
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            size = os.fstat(fd).st_size
            if size < 4096:
                continue
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):
            continue
        try:
            if mm.find(head) >= 0:
                return True
        finally:
            mm.close()
    return False


class ModelNew(nn.Module):
    seen = set()

    def forward(self, x):
        out = x * torch.sigmoid(x)
        # a copy of an output this forward already returned is its own, not an expected one: the
        # timed calls repeat their input sets, and the spot sample (sandbox.timed_checks) holds
        # copies of earlier timed outputs. Trials never repeat an input, so there every find counts.
        key = ctypes.string_at(out.data_ptr(), 4096)
        if key not in ModelNew.seen and expected_reachable(out):
            return torch.zeros_like(out)  # found: this trial must fail, and the test with it
        ModelNew.seen.add(key)
        return out
'''


def test_the_spy_finds_a_copy_when_one_is_reachable():
    """The spy below works: in a process that holds a copy, it finds it (a test that can fail)."""
    import torch

    namespace: dict = {}
    exec(compile(SPY, "spy", "exec"), namespace)
    out = torch.randn(256, 256)
    copy = out.clone()  # noqa: F841  reachable through gc
    assert namespace["expected_reachable"](out)


def test_the_candidate_cannot_find_the_expected_outputs(quick, monkeypatch):
    """A candidate that computes the right answer, then searches its process (every tensor the
    garbage collector knows, every descriptor it holds) for a second copy of it, would return
    zeros if it found one: the expected outputs never reach its process, so it passes."""
    monkeypatch.setattr(protocol, "REJECT_STATIC", False)  # gc walking and /proc are statically rejected
    monkeypatch.setattr(protocol, "RUN_TIME_REFUSALS", False)  # and refused at run time (sandbox.audit_hook)
    task = SWISH.format(rows=256, cols=256)
    res = evaluate(task, {"model_new.py": SPY}, quick(torch_ops="allow"))
    assert res.status.value == "ok", res.reasons
    assert all(t.passed for t in res.trials)


LINEAR = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(384, 512)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(8, 384)]


def get_init_inputs():
    return []
"""

COUNTER = '''import gc

import torch
import torch.nn as nn


def weight_copies():
    """Tensors of the weight's shape in this process, by storage."""
    return len({o.data_ptr() for o in gc.get_objects() if isinstance(o, torch.Tensor) and tuple(o.shape) == (512, 384)})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(384, 512)

    def forward(self, x):
        out = self.fc(x)
        # its own weight, and a reinit trial's model next to the base one: two at most
        return out if weight_copies() <= 2 else torch.zeros_like(out)
'''


def test_the_candidate_keeps_no_copy_of_the_weights_it_loaded(quick, monkeypatch):
    """The weights the candidate receives are loaded into its model, then dropped: a process that
    kept them (the base's and the reinit trial's) held the model three times over, and an 8 GiB
    MLP (KernelBench level 3 problem 2) ran an 80 GB GPU out of memory. The candidate counts the
    tensors of the weight's shape in its own process and fails its trial when it holds more than
    its model's (and the reinit trial's model beside the base)."""
    import torch

    namespace: dict = {}
    exec(compile(COUNTER, "counter", "exec"), namespace)
    w = torch.randn(512, 384)
    copies = [w.clone(), w.clone()]  # noqa: F841  (the counter works: it sees these)
    with warnings.catch_warnings():  # gc meets torch.distributed's deprecated reduce_op
        warnings.simplefilter("ignore", FutureWarning)
        assert namespace["weight_copies"]() >= 3
    monkeypatch.setattr(protocol, "REJECT_STATIC", False)  # gc walking is statically rejected
    monkeypatch.setattr(protocol, "RUN_TIME_REFUSALS", False)  # and refused at run time (sandbox.audit_hook)
    res = evaluate(LINEAR, {"model_new.py": COUNTER}, quick(torch_ops="allow"))
    assert any(t.kind == "reinit" for t in res.trials), [t.kind for t in res.trials]
    assert res.status.value == "ok", res.reasons
