"""A generated kernel file over the workspace's limit per file is written as one translation unit
in parts: kernels/fused.cpp (.cu) includes headers kernels/fused_partN.h (.cuh). KernelBench
L3/29 SwinMLP's CUDA was 306 KB in one file, over the 256 KB limit, so it had no generated
candidate at all."""

from __future__ import annotations

import re

import pytest

from agent.builtin import pipeline
from agent.builtin.graph import analyze_source
from agent.builtin.kernelgen import kernel_files
from agent.evaluator import LocalEvaluator

# Four different fused groups, each between two library GEMMs, so each is a kernel of its own.
SOURCE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)
        self.c = nn.Linear(d, d)

    def forward(self, x):
        x = torch.softmax(x * 0.5, dim=-1)
        x = self.a(x)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        x = self.b(x)
        x = torch.nn.functional.gelu(x) - x.amax(-1, keepdim=True)
        x = self.c(x)
        return torch.tanh(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64]
"""


def test_bodies_are_packed_into_parts_under_the_limit_and_included_in_order():
    head, tail = "// head\n" + "h" * 900 + "\n", "// tail\n" + "t" * 900 + "\n"
    bodies = [f"// body {i}\n" + "b" * 700 + "\n" for i in range(7)]
    files = kernel_files("cuda", head, bodies, tail, limit=2000)
    main = files.pop("kernels/fused.cu")
    assert list(files) == [f"kernels/fused_part{i}.cuh" for i in range(1, len(files) + 1)] and len(files) >= 3
    assert all(len(t.encode()) <= 2000 for t in [main, *files.values()])
    assert main.index("// head") < main.index('#include "fused_part1.cuh"') < main.index("// tail")
    included = "".join(files[f"kernels/{n}"] for n in re.findall(r'#include "(\S+)"', main))
    assert [f"// body {i}" for i in range(7)] == re.findall(r"// body \d", included)
    assert kernel_files("cpu", head, bodies, tail, limit=None) == {
        "kernels/fused.cpp": "\n".join([head, *bodies, tail])
    }


@pytest.fixture(scope="module")
def analysis():
    an = analyze_source(SOURCE, profile=False)
    assert an.ok, an.error
    return an


def test_a_split_candidate_is_correct_in_the_sandbox_and_a_stale_part_is_inert(analysis, monkeypatch, tmp_path):
    whole = pipeline.build_candidate(analysis.graph, analysis.data, "cpu", torch_ops="allow")
    assert list(whole.files) == ["model_new.py", "kernels/fused.cpp"] and len(whole.plan.groups) >= 4
    limit = len(whole.files["kernels/fused.cpp"].encode()) - 1
    monkeypatch.setattr(pipeline, "MAX_FILE_BYTES", limit)
    split = pipeline.build_candidate(analysis.graph, analysis.data, "cpu", torch_ops="allow")
    parts = [p for p in split.files if p.startswith("kernels/fused_part")]
    assert parts and split.kernel_path == "kernels/fused.cpp"
    assert all(len(t.encode()) <= limit for t in split.files.values())
    # a part that an earlier, larger candidate wrote and this one no longer includes
    files = {**split.files, "kernels/fused_part9.h": '#error "a stale part must never be compiled"\n'}
    res = LocalEvaluator(cache_dir=str(tmp_path / "cache")).evaluate(
        SOURCE, files, {"compile_baseline": False, "timing_budget_s": 0.05, "min_timed_calls": 3}
    )
    assert res.correct, res.reasons


def test_a_file_over_the_limit_even_when_split_is_named(analysis, monkeypatch):
    whole = pipeline.build_candidate(analysis.graph, analysis.data, "cpu", torch_ops="allow")
    limit = len(whole.files["model_new.py"].encode()) + 1  # model_new.py fits, the kernels' prelude does not
    monkeypatch.setattr(pipeline, "MAX_FILE_BYTES", limit)
    with pytest.raises(pipeline.GenerationError, match=r"kernels/fused.cpp would be \d+ bytes"):
        pipeline.build_candidate(analysis.graph, analysis.data, "cpu", torch_ops="allow")
