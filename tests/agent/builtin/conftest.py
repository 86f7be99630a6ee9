"""Shared helpers for the built-in policy's tests: example tasks at CPU-friendly sizes."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

EXAMPLES = Path("/work/shared/examples")
REPO = Path(__file__).resolve().parents[3]
SUITE = REPO / "benchmarks" / "tasks"


def task_source(name: str, **sizes: int) -> str:
    """An example task (shared examples first, then the suite), with size constants replaced."""
    p = EXAMPLES / f"{name}.py"
    if not p.exists():
        p = SUITE / f"{name}.py"
    src = p.read_text()
    for k, v in sizes.items():
        src, n = re.subn(rf"^{k} = \d+$", f"{k} = {v}", src, flags=re.M)
        assert n == 1, f"{name} has no size constant {k}"
    return src


def load_module(name: str, src: str) -> types.ModuleType:
    m = types.ModuleType(name)
    exec(compile(src, name, "exec"), m.__dict__)
    return m


SMALL = {
    "row_softmax_small": {"rows": 64, "cols": 256},
    "rmsnorm_swish": {"rows": 64, "hidden": 256},
    "diag_scale_matmul": {"N": 128, "M": 64},
    "linear_gelu_residual": {"batch": 32, "features": 64},
    "basic_residual_block": {"batch": 2, "cin": 8, "cout": 16, "size": 12},
    "gemm_divide_sum_scale": {"batch": 32, "in_features": 64, "hidden_size": 48},
}


@pytest.fixture
def small_source():
    return lambda name: task_source(name, **SMALL.get(name, {}))


def cuda_options(tmp_path: Path, **kw):
    """EvalOptions for the GPU tests: cuda, no torch.compile baseline, a short timing budget."""
    from sandbox import EvalOptions

    base = {"compile_baseline": False, "timing_budget_s": 0.2, "cache_dir": str(tmp_path), "eval_timeout_s": 300}
    return EvalOptions(backend="cuda", **{**base, **kw})
