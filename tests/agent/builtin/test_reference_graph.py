"""The graphed reference (agent.builtin.cudagraph) off the GPU: the file is the reference's class and
forward, and inputs that are not CUDA tensors take the forward op by op, so CPU results are the
reference's. Its replay is checked on the GPU (test_gpu_graph.py)."""

from __future__ import annotations

import pytest
import torch

from agent.builtin.fallback import fallback_model

from .conftest import load_module
from .test_gpu_graph import LSTM_TASK


def test_graphed_reference_on_cpu_is_the_reference():
    src = fallback_model(LSTM_TASK, ["test"], graphed=True)
    assert "_kw_graphed_reference(self, super().forward, inputs)" in src
    ref_mod, new_mod = load_module("task", LSTM_TASK), load_module("model_new", src)
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs())
    new = new_mod.ModelNew(*ref_mod.get_init_inputs())
    new.load_state_dict(ref.state_dict())
    x = ref_mod.get_inputs()
    with torch.no_grad():
        torch.testing.assert_close(new(*x), ref(*x), rtol=0, atol=0)
    assert "_kw_graphs" not in new.__dict__, "a CPU call captured a graph"


def _cuda_policy(monkeypatch, torch_ops="allow", source=LSTM_TASK):
    """The policy planned for cuda on this CPU machine (the analysis runs on the CPU)."""
    import agent.builtin.policy as policy_mod
    from agent.builtin.policy import BuiltinPolicy
    from agent.policy import TaskInfo

    real = policy_mod.analyze_source
    monkeypatch.setattr(policy_mod, "analyze_source", lambda src, device, **k: real(src, device="cpu", **k))
    pol = BuiltinPolicy(max_variants=1, profile_best=False)
    pol.reset(TaskInfo("lstm", source, "cuda", options={"torch_ops": torch_ops}), [], [])
    return pol


def _fallback_best(host_ms, device_ms):
    from agent.builtin.policy import FALLBACK_TITLE, _Tried

    t = _Tried(FALLBACK_TITLE, {"model_new.py": fallback_model(LSTM_TASK, ["x"])}, "ok", 1, 2.0, 1.0)
    t.host_ms, t.device_ms = host_ms, device_ms
    return t


@pytest.mark.slow  # moved out of the fast tier: CI near its 20 minutes (2026-12-06)
def test_the_reference_graph_is_tried_only_for_a_launch_bound_fallback(monkeypatch):
    from agent.builtin.policy import REFERENCE_GRAPH_TITLE, _Tried

    pol = _cuda_policy(monkeypatch)
    kinds = [s.kind for s in pol.steps]
    assert kinds.index("fallback") + 1 == kinds.index("refgraph"), kinds
    assert REFERENCE_GRAPH_TITLE in [s.title for s in pol.steps]
    assert "refgraph" not in [s.kind for s in _cuda_policy(monkeypatch, "forbid").steps]

    pol.tried = [_fallback_best(1.9, 2.0)]  # launching is most of its time: graph it
    action = pol._reference_graph_action(head="")
    written = {c.arguments["path"]: c.arguments["content"] for c in action.tool_calls if c.name == "write_file"}
    assert "_kw_graphed_reference(self, super().forward, inputs)" in written["model_new.py"]
    assert pol.pending is not None and pol.pending.label.endswith("[CUDA graph]")

    pol.pending = None
    pol.tried = [_fallback_best(0.2, 2.0)]  # device-bound: no graph, the next step instead
    action = pol._reference_graph_action(head="")
    assert "not launch-bound" in action.message and pol.pending is None

    generated = _Tried("Fuse the captured graph as it is", {"model_new.py": ""}, "ok", 1, 1.9, 1.03)
    generated.host_ms, generated.device_ms = 1.9, 2.0
    pol.tried = [generated]  # no fallback ran: nothing to graph here (a generated best has its own step)
    pol._reference_graph_action(head="")
    assert pol.pending is None

    pol.tried = [generated, _fallback_best(1.9, 2.0)]  # a generated candidate edged the fallback in noise
    pol._reference_graph_action(head="")
    assert pol.pending is not None and pol.pending.label.endswith("[CUDA graph]")


UNCAPTURED_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if y.abs().max().item() > 1e6:  # data-dependent control flow: no graph to generate from
            return y * 0
        return torch.tanh(y)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_a_forward_that_cannot_be_captured_still_gets_the_reference_graph(monkeypatch):
    """Captures can fail where the graph would pay most (bidirectional RNNs ran the analysis out of
    CPU time): the reference's computation and its CUDA graph do not need a captured graph."""
    pol = _cuda_policy(monkeypatch, source=UNCAPTURED_TASK)
    assert not pol.analysis.ok
    kinds = [s.kind for s in pol.steps]
    assert kinds[:3] == ["analyse", "fallback", "refgraph"] and kinds[-1] == "finish", kinds
    assert "refgraph" not in [s.kind for s in _cuda_policy(monkeypatch, "forbid", UNCAPTURED_TASK).steps]


def test_tensors_from_python_numbers_are_kept_for_the_capture():
    """A capture forbids `torch.tensor(number, device=cuda)` (a copy from the host): the warm-up call
    keeps each such tensor in call order and the capture's identical call gets a device copy of
    it; a call that asks for another value, or for a CPU tensor, goes to torch (off the GPU: the
    meta device stands in for cuda)."""
    from agent.builtin.cudagraph import CAPTURE_HELPER

    ns: dict = {"torch": torch}
    exec(CAPTURE_HELPER, ns)
    keep = ns["_KwHostConstants"]

    def forward(x, scale):
        a = torch.tensor(scale, device=x.device)
        b = torch.tensor([1, 2], device="cpu")
        c = torch.as_tensor([[2.0, 3.0]], device=x.device)
        return x * a + c.sum(), b

    x = torch.randn(3, device="meta")
    warm = keep()
    with warm:
        forward(x, 1 / 0.01)
    assert [k for k, _ in warm.kept] == [
        repr(((1 / 0.01,), [("device", x.device)])),
        repr((([[2.0, 3.0]],), [("device", x.device)])),
    ]
    capture = keep(warm.kept)
    with capture:
        out, b = forward(x, 1 / 0.01)
    assert capture.next == 2 and out.device.type == "meta" and b.device.type == "cpu"
    other = keep(warm.kept)
    with other:
        forward(x, 2.0)  # another scale: not the kept tensor, and the order no longer matches
    assert other.next == 0
    assert torch._C._len_torch_function_stack() == 0
