"""The shape trial (issue 17, item 2): a candidate that is right only at the benchmark's size, or
below it, must fail. The trial scales the task's module-level size constants down AND up (where
the reference runs and the inputs stay within bounds) and says which shapes it checked."""

from __future__ import annotations

from sandbox import evaluate
from sandbox.schema import Status
from tests.sandbox.helpers import task

# Computes only the top-left 512x512 tile of the product (the rest stays zero): exact at the
# task's N = 512 and at any smaller N, wrong at 1024, where it covers a quarter of the output.
TOP_LEFT_TILE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        n, m = A.shape[0], B.shape[1]
        t, u = min(n, 512), min(m, 512)
        out = torch.zeros(n, m, dtype=A.dtype, device=A.device)
        out[:t, :u] = A[:t] @ B[:, :u]
        return out
"""


def test_a_kernel_that_computes_only_the_benchmarks_tile_fails_the_larger_shape(quick):
    res = evaluate(task("matmul_512.py"), {"model_new.py": TOP_LEFT_TILE}, quick(torch_ops="allow", cpu_threads=1))
    assert res.status == Status.INCORRECT, (res.status, res.reasons)
    shape = [t for t in res.trials if t.kind == "shape"]
    assert [t.passed for t in shape if "N=512->1024" in t.message] == [False], [t.message for t in shape]
    assert all(t.passed for t in res.trials if t.kind == "random")  # right at the benchmark's size
    assert any("N=512->1024" in r for r in res.reasons)


def test_the_result_says_which_shapes_were_checked(quick):
    honest = {"model_new.py": task("matmul_512.py").replace("class Model(", "class ModelNew(")}
    res = evaluate(task("matmul_512.py"), honest, quick(torch_ops="allow", cpu_threads=1))
    assert res.status == Status.OK, res.reasons
    notes = [t.message for t in res.trials if t.kind == "shape"]
    assert any("N=512->384" in n for n in notes) and any("N=512->1024" in n for n in notes), notes
    assert any(
        f.startswith("protocol: shapes checked: N=512 (benchmark, inputs 512x512, 512x512); N=512->384; N=512->1024")
        for f in res.audit.findings
    ), res.audit.findings


# A task whose Model reads a module-level size in __init__ and forward (KernelBench's VanillaRNN
# does): the shape trial changes it in the task's module; a candidate written after the task, with
# the same constant, must see the same change or it fails a trial an honest copy should pass.
GLOBAL_SIZES = """
import torch
import torch.nn as nn

batch_size = 8
hidden = 16


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.register_buffer("h0", torch.arange(batch_size * hidden, dtype=torch.float32).view(batch_size, hidden))
        self.lin = nn.Linear(hidden, hidden)

    def forward(self, x):
        return self.lin(x).view(batch_size, -1) + self.h0


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden]
"""


def test_a_candidate_reading_the_same_module_level_sizes_as_the_task_passes_the_shape_trials(quick):
    honest = {"model_new.py": GLOBAL_SIZES.replace("class Model(", "class ModelNew(")}
    res = evaluate(GLOBAL_SIZES, honest, quick(torch_ops="allow", cpu_threads=1))
    assert res.status == Status.OK, res.reasons
    shape = [t for t in res.trials if t.kind == "shape"]
    assert len(shape) == 2 and all(t.passed for t in shape), [(t.message, t.passed) for t in shape]
    assert any("batch_size=8->" in t.message for t in shape), [t.message for t in shape]


# torchvision's bottleneck: the projection shortcut exists only when inplanes != 4 * planes. At the
# benchmark's sizes it does not; shrinking each size by 3/4 on its own terms (64 -> 48, 16 -> 17)
# builds a module with a projection, another program. The trial must pass over such a change.
BRANCHING = """
import torch
import torch.nn as nn

batch = 64
inplanes = 64
planes = 16


class Model(nn.Module):
    def __init__(self, inplanes, planes):
        super().__init__()
        self.fc = nn.Linear(inplanes, planes * 4)
        self.proj = nn.Linear(inplanes, planes * 4) if inplanes != planes * 4 else None

    def forward(self, x):
        identity = x if self.proj is None else self.proj(x)
        return self.fc(x) + identity


def get_inputs():
    return [torch.randn(batch, inplanes)]


def get_init_inputs():
    return [inplanes, planes]
"""

# Right only for the structure it was written for: without a projection. A shape trial that built
# the reference with a projection would fail it, though it is right for this program at any size.
NO_PROJECTION = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, inplanes, planes):
        super().__init__()
        self.fc = nn.Linear(inplanes, planes * 4)
        self.proj = None

    def forward(self, x):
        return self.fc(x) + x
"""


def test_the_shape_trial_keeps_the_modules_structure(quick):
    res = evaluate(BRANCHING, {"model_new.py": NO_PROJECTION}, quick(torch_ops="allow", cpu_threads=1))
    assert res.status == Status.OK, res.reasons
    shape = [t.message for t in res.trials if t.kind == "shape"]
    assert len(shape) == 2, shape
    smaller = next(m for m in shape if "->" in m and "passed over" in m)
    assert "another module structure" in smaller and "inplanes=64->48" not in smaller, shape
    assert any("inplanes=64->128" in m and "planes=16->32" in m for m in shape), shape  # 2x keeps the ratio
