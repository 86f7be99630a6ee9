"""The analysis draws a large task's inputs as fake tensors (agent.builtin.task_inputs): an fx
capture needs their shapes only, and drawing 6 GiB on the CPU took minutes of a level-1 problem."""

from __future__ import annotations

import json

import pytest

from agent.builtin import analyze, task_inputs

TASK = """
import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensor

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return torch.softmax(torch.tanh(x) * self.scale, dim=-1)

def get_inputs():
    x = torch.rand(512, 1024)  # 2 MiB
    if not isinstance(x, FakeTensor):
        with open(__file__ + ".drawn", "a") as f:
            f.write("real\\n")
    return [x]

def get_init_inputs():
    return [1024]
"""

READS_ITS_VALUES = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, idx):
        return x[idx]

def get_inputs():
    idx = torch.randint(0, 64, (4096,))
    n = int(idx.max()) + 1  # a value: a fake draw cannot give it
    return [torch.randn(n, 256), idx]

def get_init_inputs():
    return []
"""


def _analysed(tmp_path, monkeypatch, fake_from: int, source: str = TASK) -> tuple[dict, int]:
    path = tmp_path / f"task_{fake_from}.py"
    path.write_text(source)
    monkeypatch.setattr(task_inputs, "FAKE_FROM_BYTES", fake_from)
    out = analyze.analyze(str(path), "cpu", profile=False)
    drawn = path.with_name(path.name + ".drawn")
    return out, len(drawn.read_text().splitlines()) if drawn.exists() else 0


def test_a_large_tasks_fx_capture_is_the_same_without_drawing_its_inputs(tmp_path, monkeypatch):
    real, real_draws = _analysed(tmp_path, monkeypatch, 1 << 40)
    fake, fake_draws = _analysed(tmp_path, monkeypatch, 1 << 20)
    assert real["ok"] and real["capture"] == "fx" and real_draws == 1
    assert fake_draws == 0
    assert json.dumps(fake, sort_keys=True) == json.dumps(real, sort_keys=True)


def test_a_profile_on_the_cpu_draws_them_for_real(tmp_path, monkeypatch):
    path = tmp_path / "task.py"
    path.write_text(TASK)
    monkeypatch.setattr(task_inputs, "FAKE_FROM_BYTES", 1 << 20)
    out = analyze.analyze(str(path), "cpu", profile=True)
    assert out["eager_profile"]["device"] == "cpu" and out["eager_profile"]["rows"]
    assert path.with_name("task.py.drawn").read_text().splitlines() == ["real"]


@pytest.mark.parametrize("fake_from", [0, 1 << 40])
def test_a_draw_that_reads_its_values_is_made_for_real(tmp_path, monkeypatch, fake_from):
    path = tmp_path / "reads.py"
    path.write_text(READS_ITS_VALUES)
    mod = analyze._load_task(str(path))
    inputs = task_inputs.TaskInputs(mod, fake_from=fake_from)
    assert not inputs.is_fake and inputs.shapes()[0].shape[1] == 256
