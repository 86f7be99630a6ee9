"""cuDNN's algorithm search on the GPU (run on the H200): the reference's own computation with
and without kwrt.search_conv_algorithms(), each through the real sandbox, on the convolutions
KernelBench's level 2 spends its time in (fp32, TF32 off): a 3-d, a transposed 3-d and a 2-d
convolution. Asserts both are correct and the setting is recorded; prints both speedups (the
ratio of the two is the search's gain, within one evaluation each)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

from agent.builtin.convsearch import with_search  # noqa: E402
from agent.builtin.fallback import fallback_model  # noqa: E402
from sandbox import EvalOptions, evaluate  # noqa: E402

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.{conv}

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn({inputs})]


def get_init_inputs():
    return []
"""

CASES = {
    "conv3d": ("Conv3d(16, 32, 3)", "8, 16, 16, 32, 32"),
    "conv_transpose3d": ("ConvTranspose3d(32, 16, 3, stride=2, padding=1)", "8, 32, 8, 16, 16"),
    "conv2d": ("Conv2d(64, 128, 3, padding=1)", "32, 64, 56, 56"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_search_is_correct_and_recorded_and_its_gain_is_printed(name, tmp_path):
    conv, inputs = CASES[name]
    src = TASK.format(conv=conv, inputs=inputs)
    plain = {"model_new.py": fallback_model(src, ["the test's baseline"])}
    searched = {"model_new.py": with_search(plain["model_new.py"])}
    opts = EvalOptions(backend="cuda", torch_ops="allow", cache_dir=str(tmp_path))
    a, b = evaluate(src, plain, opts), evaluate(src, searched, opts)
    assert a.status.value == "ok" and b.status.value == "ok", (a.reasons, b.reasons)
    assert any(f.startswith("setting: cuDNN searched") for f in b.audit.findings), b.audit.findings
    assert not any(f.startswith("setting:") for f in a.audit.findings)
    print(
        f"\n{name}: default {a.speedup_vs_eager:.3f}x vs eager, with the search {b.speedup_vs_eager:.3f}x "
        f"(ci low {b.speed.vs_eager.ci_low:.3f}x), {b.speedup_vs_compile or float('nan'):.3f}x vs torch.compile"
    )
