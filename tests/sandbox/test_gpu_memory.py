"""Evaluations that share a GPU share its memory (sandbox.devmem): each holds a part sized by what
its reference measured, and one that ran out beside something else is evaluated again with the
whole device. Run on the GPU host; skips without a CUDA device."""

from __future__ import annotations

import pytest
import torch

from sandbox import EvalOptions, devmem, evaluate
from sandbox.schema import Status

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

TANH = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn({rows}, 1 << 20)]


def get_init_inputs():
    return []
"""


def _options(cache_dir: str) -> EvalOptions:
    return EvalOptions(
        backend="cuda", torch_ops="allow", compile_baseline=False, timing_budget_s=0.2, cache_dir=cache_dir
    )


def _honest(task: str) -> dict[str, str]:
    return {"model_new.py": task.replace("class Model(", "class ModelNew(")}


def test_a_cuda_evaluation_holds_a_share_sized_by_its_footprint(cache_dir):
    task = TANH.format(rows=256)  # 1 GiB in, 1 GiB out
    res = evaluate(task, _honest(task), _options(cache_dir))
    assert res.status == Status.OK, res.reasons
    held = [f for f in res.audit.findings if f.startswith("memory: ")]
    assert held and "parts held" in held[0], res.audit.findings
    parts = int(held[0].split()[1])
    assert 1 < parts < devmem.PARTS, held  # more than the floor for 2 GiB per set, less than the device


def test_running_out_beside_another_process_is_evaluated_again_with_the_whole_device(cache_dir):
    """This process takes all but ~2 GiB of the device (as a process outside Kernelwright would) and
    gives it back once the first attempt is done: the 4 GiB task's first attempt runs out of
    memory, the second (holding every part) passes, and the result says why it ran twice."""
    free, _ = torch.cuda.mem_get_info()
    hog = [torch.empty(int(free - (2 << 30)), dtype=torch.uint8, device="cuda")]
    steps: list[str] = []

    def on_progress(step: str, detail: dict) -> None:
        steps.append(step)
        if step == "done" and hog:
            hog.clear()
            torch.cuda.empty_cache()

    task = TANH.format(rows=1024)
    try:
        res = evaluate(task, _honest(task), _options(cache_dir), on_progress)
    finally:
        hog.clear()
        torch.cuda.empty_cache()
    assert steps.count("done") == 2, steps
    assert res.status == Status.OK, res.reasons
    again = [f for f in res.audit.findings if "the first attempt ran out of device memory" in f]
    assert again, res.audit.findings
    assert any(f.startswith(f"memory: {devmem.PARTS} of the device's") for f in res.audit.findings), res.audit.findings


def test_an_evaluations_device_memory_is_free_when_it_returns(cache_dir):
    """A killed child's worker runs two levels below the process the zygote forked, in its own
    PID namespace, and exits after that process has been reaped: the evaluation waits for it, so
    the share of the device it gives back is free (the next evaluation, or test, ran out of
    memory beside the 78 GiB its children still held: H100, 2026-12-06)."""
    task = TANH.format(rows=1024)  # 4 GiB tensors: the children hold tens of GiB
    before, _ = torch.cuda.mem_get_info()
    res = evaluate(task, _honest(task), _options(cache_dir))
    after, _ = torch.cuda.mem_get_info()
    assert res.status == Status.OK, res.reasons
    assert after >= before - (1 << 30), f"{(before - after) / 2**30:.1f} GiB still held after the evaluation returned"
