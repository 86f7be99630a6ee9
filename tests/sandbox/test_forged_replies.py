"""A candidate writes to its own end of the channel (an inherited unix socket it finds with
fstat, written with os.write: no socket object needed): what it forges is refused by the parent's channel before the parent allocates for it
(red team parent_memory: a reply announcing one 2 GiB inline tensor took the evaluator to
2.2 GB; any size up to 16 GiB was accepted)."""

from __future__ import annotations

from pathlib import Path

import pytest

CPP = (Path(__file__).parent / "candidates" / "softmax_cpp" / "kernels" / "softmax.cpp").read_text()

FORGER = """import json
import os
import stat

import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()
SIZE = 64 << 20
_sent = []


def _flood():
    for fd in range(3, 256):
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
        except OSError:
            continue
        head = json.dumps({"__dict__": {"ok": True, "pad": {"__tensor__": 0, "dtype": "uint8", "shape": [SIZE]}}}).encode()
        _write(fd, len(head).to_bytes(8, "little") + head)
        chunk = bytes(1 << 20)
        for _ in range(SIZE >> 20):
            _write(fd, chunk)
        _sent.append(fd)
        return


def _write(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class ModelNew(nn.Module):
    def forward(self, x):
        if not _sent:
            _flood()
        rows, cols = x.shape
        out = torch.empty_like(x)
        lib.softmax_rows(x, out, rows, cols, kwrt.stream())
        return out
"""


@pytest.fixture(autouse=True)
def walls_only(monkeypatch):
    """This probes a wall behind the run-time refusals in the candidate's process
    (sandbox.audit_hook, where present): they are off, as for tests/sandbox/escape."""
    from sandbox import protocol

    monkeypatch.setattr(protocol, "RUN_TIME_REFUSALS", False, raising=False)


def test_a_forged_inline_tensor_is_refused_unallocated(quick):
    from sandbox import evaluate
    from sandbox.schema import Status
    from tests.sandbox.helpers import task

    res = evaluate(task("softmax_tiny.py"), {"model_new.py": FORGER, "kernels/softmax.cpp": CPP}, quick())
    assert res.status != Status.OK
    assert any("inline tensor of 67108864 bytes" in r for r in res.reasons), res.reasons


SMALL_FORGER = FORGER.replace("SIZE = 64 << 20", "SIZE = 0").replace(
    '{"__dict__": {"ok": True, "pad": {"__tensor__": 0, "dtype": "uint8", "shape": [SIZE]}}}',
    '{"__dict__": {"ok": True}}',
)


def test_a_forged_reply_without_its_keys_is_a_result_not_a_raise(quick):
    """A reply of the right size and the wrong form (no "checks" for a trial) made evaluate()
    raise KeyError out of the parent (red team parent_memory); it is a result now."""
    from sandbox import evaluate
    from sandbox.schema import Status
    from tests.sandbox.helpers import task

    assert '{"__dict__": {"ok": True}}' in SMALL_FORGER
    res = evaluate(task("softmax_tiny.py"), {"model_new.py": SMALL_FORGER, "kernels/softmax.cpp": CPP}, quick())
    assert res.status != Status.OK and res.reward == -1, res.reasons


POISONING_TASK = """import sys
import torch
import torch.nn as nn

_w = sys.modules.get("sand" + "box.wor" + "ker")
if _w is not None:
    def _fake(device, dtype_name="float32"):
        return {"bandwidth_gbs": 10 ** 4000, "tflops": 1.0, "dtype": dtype_name}
    setattr(_w, "_measure_" + "ceilings", _fake)


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""


def test_a_task_cannot_poison_the_device_ceilings_of_other_evaluations(quick, tmp_path):
    """Red team round 4: a task (its child has no audit hook) answered the ceilings with a
    4,000-digit bandwidth; the parent cached it host-wide, and every later passing evaluation on
    the device raised OverflowError out of evaluate(). Ceilings are now checked, cached per task,
    and the roofline is a report that never fails a result."""
    from sandbox import evaluate
    from sandbox.protocol import baseline
    from sandbox.schema import Status
    from tests.sandbox.helpers import candidate, task

    options = quick(cache_dir=str(tmp_path))
    hostile = evaluate(POISONING_TASK, candidate("softmax_cpp"), options)
    assert hostile.status == Status.OK and hostile.roofline is None, hostile.reasons
    assert any("could not measure the device ceilings" in f for f in hostile.audit.findings)
    assert baseline(POISONING_TASK, options).status == Status.OK
    honest = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), options)
    assert honest.status == Status.OK, honest.reasons
    assert honest.roofline is not None and 0 < honest.roofline.peak_bandwidth_gbs < 1e6
