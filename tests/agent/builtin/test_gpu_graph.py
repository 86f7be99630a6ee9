"""The CUDA-graph forward through the real sandbox (run by the lead on the H200): the graphed
candidate passes every check the op-by-op one passes, and the profiler sees its kernels."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

from agent.builtin.graph import analyze_source  # noqa: E402
from agent.builtin.pipeline import build_candidate  # noqa: E402
from agent.builtin.rewrites import all_rewrites  # noqa: E402
from sandbox import evaluate  # noqa: E402

from .conftest import cuda_options, task_source  # noqa: E402


@pytest.mark.parametrize(
    "name,sizes",
    [
        ("basic_residual_block", {"batch": 4, "cin": 16, "cout": 32, "size": 16}),
        ("linear_gelu_residual", {"batch": 64, "features": 256}),
    ],
)
def test_graphed_forward_passes_the_sandbox(name, sizes, tmp_path):
    src = task_source(name, **sizes)
    an = analyze_source(src, profile=False)
    rw = all_rewrites(an.graph)
    g = rw[-1].graph if rw else an.graph
    opts = cuda_options(tmp_path)
    plain = evaluate(src, build_candidate(g, an.data, "cuda").files, opts)
    graphed = evaluate(src, build_candidate(g, an.data, "cuda", graph=True).files, opts)
    assert plain.status.value == "ok", plain.reasons
    assert graphed.status.value == "ok", graphed.reasons
    assert graphed.audit.graph_launches >= 1 and plain.audit.graph_launches == 0
    assert any(k.startswith("void fused_0_kernel") for k in graphed.audit.kernels), graphed.audit.kernels
    assert not graphed.audit.torch_compute_ops, graphed.audit.torch_compute_ops
    c, p = graphed.timing.candidate, plain.timing.candidate
    print(
        f"{name}: op by op {p.median_ms:.4f} ms (host {p.host_median_ms:.4f}), graph {c.median_ms:.4f} ms "
        f"(host {c.host_median_ms:.4f}), eager {plain.timing.eager.median_ms:.4f} ms"
    )


LSTM_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, d, h, layers):
        super().__init__()
        self.lstm = nn.LSTM(d, h, layers, batch_first=True)
        self.fc = nn.Linear(h, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])

def get_inputs():
    return [torch.rand(4, 64, 32)]

def get_init_inputs():
    return [32, 64, 2]
"""


def test_graphed_reference_passes_the_sandbox(tmp_path):
    """A recurrent layer's per-step kernels replayed as one graph: every check the reference's own
    computation passes (fresh inputs, the shape trial falls back to a new capture), and graph launches."""
    from agent.builtin.fallback import fallback_model

    opts = cuda_options(tmp_path, torch_ops="allow")
    plain = evaluate(LSTM_TASK, {"model_new.py": fallback_model(LSTM_TASK, ["test"])}, opts)
    graphed = evaluate(LSTM_TASK, {"model_new.py": fallback_model(LSTM_TASK, ["test"], graphed=True)}, opts)
    assert plain.status.value == "ok", plain.reasons
    assert graphed.status.value == "ok", graphed.reasons
    assert graphed.audit.graph_launches >= 1 and plain.audit.graph_launches == 0
    c, p = graphed.timing.candidate, plain.timing.candidate
    print(f"lstm: reference {p.median_ms:.4f} ms (host {p.host_median_ms:.4f}), graphed {c.median_ms:.4f} ms")


CONSTANT_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.logit_scale = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        scale = torch.clamp(self.logit_scale, max=torch.log(torch.tensor(1.0 / 0.01, device=x.device))).exp()
        return torch.softmax(self.fc(x) * scale, dim=-1)

def get_inputs():
    return [torch.randn(8, 64, 128)]

def get_init_inputs():
    return [128]
"""


def test_graphed_reference_of_a_forward_that_makes_a_tensor_from_a_number(tmp_path):
    """SwinV2's logit scale: `torch.tensor(1. / 0.01, device=x.device)` in the forward is a copy
    from the host, which a capture forbids; the warm-up keeps the tensor and the graph reads it."""
    from agent.builtin.fallback import fallback_model

    opts = cuda_options(tmp_path, torch_ops="allow")
    files = {"model_new.py": fallback_model(CONSTANT_TASK, ["test"], graphed=True)}
    graphed = evaluate(CONSTANT_TASK, files, opts)
    assert graphed.status.value == "ok", graphed.reasons
    assert graphed.audit.graph_launches >= 1
    print(
        f"constant: graphed {graphed.timing.candidate.median_ms:.4f} ms, eager {graphed.timing.eager.median_ms:.4f} ms"
    )
