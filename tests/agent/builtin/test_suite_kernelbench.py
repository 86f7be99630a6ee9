"""`python -m benchmarks.suite --kernelbench DIR` (issue 18, point 4): problems of a local KernelBench
checkout through the real loop and sandbox, with the built-in policy or a model behind an
OpenAI-compatible endpoint (here the scripted server on loopback), the paper's table per level and
a JSON row per task. The problems are written here in KernelBench's format (no KernelBench file is
in this repository)."""

from __future__ import annotations

import json
import re

import pytest

from agent.testing.scenarios import call, reply
from benchmarks.suite import main

RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 256
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

GEMM_RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.gemm(x) * 2.0)


batch_size = 128
in_features = 256
out_features = 256


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
"""

MODEL_NEW = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp_min(x, 0.0)
"""


def _checkout(tmp_path):
    root = tmp_path / "KernelBench"
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    (root / "level1" / "19_ReLU.py").write_text(RELU)
    (root / "level2" / "76_Gemm_Multiply_ReLU.py").write_text(GEMM_RELU)
    return root


def _row(table: str, metric: str) -> list[str]:
    line = next(ln for ln in table.splitlines() if ln.startswith(f"| {metric} |"))
    return [c.strip() for c in line.strip("|").split("|")[1:]]


FAST = ["--no-compile-baseline", "--no-profile", "--max-variants", "1", "--max-turns", "6"]


@pytest.mark.slow  # 10-20 s on 2 cores: the slow tier (./kw test -m slow)
def test_the_builtin_policy_over_two_levels_prints_a_column_per_level(tmp_path, capsys):
    out = tmp_path / "kb.json"
    assert main(["--kernelbench", str(_checkout(tmp_path)), "--level", "1", "2", "--out", str(out), *FAST]) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("| metric | L1 | L2 | all |") :]
    assert _row(table, "tasks") == ["1", "1", "2"]
    assert _row(table, "correct") == ["100.0%", "100.0%", "100.0%"]
    for metric in ("fast_1.0", "fast_1.5", "geomean vs eager", "median fraction of speed of light"):
        assert len(_row(table, metric)) == 3
    rows = json.loads(out.read_text())["tasks"]
    assert {r["name"] for r in rows} == {"L1/19_ReLU", "L2/76_Gemm_Multiply_ReLU"}
    assert {r["extra"]["level"] for r in rows} == {"L1", "L2"} and all(r["correct"] for r in rows)
    # fast_p counts correct tasks faster than p x eager: consistent with the rows written
    fast1 = sum(r["correct"] and (r["speedup_vs_eager"] or 0) > 1.0 for r in rows)
    assert _row(table, "fast_1.0")[2] == f"{fast1 / 2:.1%}"


def test_a_model_behind_an_openai_endpoint_is_the_policy(tmp_path, capsys, scripted):
    server = scripted(
        {
            "replies": [
                reply(call("read_file", path="reference.py")),
                reply(call("write_file", path="model_new.py", content=MODEL_NEW)),
                reply(call("evaluate")),
                reply(call("finish", summary="relu as clamp_min")),
            ]
        }
    )
    out = tmp_path / "kb.json"
    args = ["--kernelbench", str(_checkout(tmp_path)), "--level", "1", "--out", str(out), *FAST]
    assert main([*args, "--base-url", server.url, "--model", "scripted-model", "--api-key", "k"]) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("| metric | L1 |") :]
    assert _row(table, "correct") == ["100.0%"]
    (row,) = json.loads(out.read_text())["tasks"]
    assert row["name"] == "L1/19_ReLU" and row["correct"] and row["evaluations"] >= 1  # the loop confirms the best
    bodies = server.requests
    assert bodies and all(b.get("model") == "scripted-model" for b in bodies)
    # the model saw the problem's own text, its sizes shrunk for the CPU (--cap 32: 256 x 512 -> 16 x 32)
    assert any(re.search(r"batch_size = 16\\ndim = 32", json.dumps(b)) for b in bodies)
