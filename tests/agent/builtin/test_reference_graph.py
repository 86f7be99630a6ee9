"""The graphed reference (agent.builtin.cudagraph) off the GPU: the file is the reference's class and
forward, and inputs that are not CUDA tensors take the forward op by op, so CPU results are the
reference's. Its replay is checked on the GPU (test_gpu_graph.py)."""

from __future__ import annotations

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
