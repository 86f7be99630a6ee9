"""Task synthesis (benchmarks.synthesize, benchmarks.synth): mining, composing, the filters, the CLI."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from agent.task import task_from_source
from benchmarks.synth import checks
from benchmarks.synth.compose import Composer
from benchmarks.synth.ops import mine
from benchmarks.synth.similarity import KernelBenchIndex, jaccard, ops_of

ROOT = Path(__file__).resolve().parents[2]
KERNELBENCH = ROOT / ".kernelbench" / "KernelBench"
needs_kernelbench = pytest.mark.skipif(
    not (KERNELBENCH / "KernelBench" / "level1").is_dir(), reason="no KernelBench checkout at .kernelbench/KernelBench"
)


def task(forward: str, init: str = "", args: str = "", sizes: str = "n = 64") -> str:
    return f"""import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self{", " + args if args else ""}):
        super().__init__()
        {init or "pass"}

    def forward(self, x):
        {forward}


{sizes}


def get_inputs():
    return [torch.randn(16, n)]


def get_init_inputs():
    return [{args}]
"""


@pytest.fixture(scope="module")
def catalogue():
    return mine()


def test_mining_probes_torch_and_its_activation_modules(catalogue):
    assert {"tanh", "exp", "sigmoid", "erf"} <= set(catalogue.unary)
    assert {"add", "mul", "maximum", "hypot"} <= set(catalogue.binary)
    assert {"softmax", "cumsum"} <= set(catalogue.along_dim) and {"sum", "amax", "mean"} <= set(catalogue.reducing)
    assert {"nn.GELU", "nn.Mish", "nn.Hardswish"} <= set(catalogue.modules)
    everything = catalogue.unary + catalogue.binary + catalogue.along_dim + catalogue.reducing
    assert not [n for n in everything if n.endswith("_") or n.startswith("_")]  # no in-place, no private
    assert "sum" not in catalogue.unary and "matmul" not in catalogue.binary  # shape-changing ops are not unary


def test_similarity_reads_the_forward_with_aliases_folded():
    kb = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.gemm = nn.Linear(a, b)
        self.act = nn.LogSoftmax(dim=1)
    def forward(self, x):
        x = self.gemm(x).view(x.size(0), -1)
        return self.act(x * 2.0)
"""
    ours = task("return torch.nn.functional.log_softmax(torch.mm(x, x.t()) * 3, dim=-1)")
    assert ops_of(kb) == Counter({"matmul": 1, "mul": 1, "logsoftmax": 1})
    assert ops_of(ours) == ops_of(kb)
    assert jaccard(ops_of(kb), ops_of(task("return torch.tanh(x) * 2"))) == pytest.approx(1 / 4)


@needs_kernelbench
def test_a_kernelbench_problem_is_its_own_nearest_neighbour():
    index = KernelBenchIndex(KERNELBENCH / "KernelBench")
    assert len(index.problems) > 200
    source = (KERNELBENCH / "KernelBench" / "level2" / "12_Gemm_Multiply_LeakyReLU.py").read_text()
    near = index.nearest(ops_of(source))
    assert near.score == 1.0 and near.problem.startswith("level")


def test_composed_tasks_are_kernelbench_format_and_run(catalogue):
    composer = Composer(catalogue, random.Random(3))
    programs = [composer.program() for _ in range(12)]
    assert {p.layout for p in programs} == {"vec", "img", "seq"}
    for i, prog in enumerate(programs):
        source = prog.source()
        task_from_source(source, prog.name(i), "cpu")  # raises on a file that is not KernelBench format
        ns = checks.load(source)
        assert callable(ns["get_inputs"]) and ns["Model"](*ns["get_init_inputs"]()) is not None
    assert len({p.name(i) for i, p in enumerate(programs)}) == 12


@pytest.mark.parametrize(
    ("forward", "check", "words"),
    [
        ("return torch.rand_like(x) + x", "deterministic", "two calls on the same inputs differ"),
        ("return torch.log(x)", "finite", "non-finite"),
        ("return torch.zeros_like(x) + 1.0", "trivial", "constant"),
        ("return x.sum() * 0 + torch.ones(4, 4)", "trivial", "constant"),
        ("return undefined_name(x)", "eager", "NameError"),
        ("return (x > 0)", "eager", "not a float tensor"),
    ],
)
def test_each_filter_drops_with_its_reason(forward, check, words):
    verdict = checks.check(task(forward), with_compile=False)
    assert not verdict.kept and verdict.check == check and words in verdict.reason, verdict


def test_the_runtime_range_is_enforced():
    verdict = checks.check(task("return torch.tanh(x)"), min_ms=10.0, with_compile=False)
    assert verdict.check == "runtime" and verdict.eager_ms is not None and "outside [10.0" in verdict.reason
    assert checks.check(task("return torch.tanh(x)"), min_ms=0.0, with_compile=False).kept


@pytest.mark.slow
def test_torch_compile_is_checked_against_eager():
    verdict = checks.check(
        task("return torch.tanh(self.lin(x)) * 2", init="self.lin = nn.Linear(n, n)", args="n"), min_ms=0.0
    )
    assert verdict.kept and verdict.compile_s is not None and verdict.compile_s > 0


@needs_kernelbench
def test_cli_writes_the_kept_tasks_and_why_the_others_went(tmp_path):
    out = tmp_path / "synth"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.synthesize",
            "--count",
            "12",
            "--backend",
            "cpu",
            "--out",
            str(out),
            "--no-compile",
            "--seed",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["count"] == 12 and len(report["candidates"]) == 12
    kept = [c for c in report["candidates"] if c["kept"]]
    assert report["kept"] == len(kept) == len(list((out / "tasks").glob("*.py")))
    assert all(c["reason"] and c["check"] for c in report["candidates"] if not c["kept"])
    assert all(c["similarity"] < report["similarity_threshold"] for c in kept)
    assert sum(report["dropped_by"].values()) == 12 - len(kept)
    assert "| dropped by | candidates |" in (out / "report.md").read_text()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.synthesize",
            "--count",
            "1",
            "--out",
            str(out),
            "--kernelbench",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no KernelBench problems" in bad.stderr
