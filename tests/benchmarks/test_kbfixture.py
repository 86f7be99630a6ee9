"""KernelBench case studies hold none of KernelBench's text (benchmarks/kbfixture.py): every line
of the problem, wherever a trajectory copies it (the task event, a candidate's renamed reference,
a turn's diff), becomes a token, and comes back exactly from a checkout of the same version. The
'checkout' here is a folder of our own with a problem of our own in it."""

from __future__ import annotations

import hashlib
import json

import pytest

from agent.builtin.fallback import rename_model
from benchmarks import kbfixture

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A problem nobody may copy: a scaled residual with a clamp."""

    def __init__(self, features: int, scale_factor: float):
        super(Model, self).__init__()
        self.projection_layer = nn.Linear(features, features)
        self.scale_factor = scale_factor

    def forward(self, x):
        return torch.clamp(self.projection_layer(x) * self.scale_factor + x, min=-1.0, max=1.0)


batch_size = 128
features = 256


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, 0.5]
'''


def _fixture() -> dict:
    candidate = "import kwrt\n\n" + rename_model(PROBLEM.split("\n\n\nbatch_size")[0].split("\n\n\n", 1)[1])
    diff = "\n".join("+" + line for line in candidate.splitlines())
    return {
        "schema": 1,
        "events": [
            {"type": "task", "name": "L2/999_Fake", "source": PROBLEM},
            {"type": "files", "files": {"model_new.py": candidate}, "diff": diff},
            {"type": "message", "text": "kept the reference: " + PROBLEM.splitlines()[13]},
        ],
        "meta": {"case": "kb2_999", "task_source": PROBLEM},
    }


def _long_lines_left(data: dict) -> list[str]:
    text = json.dumps(data, ensure_ascii=False)
    lines = {line.strip() for line in PROBLEM.splitlines() if len(line.strip()) >= kbfixture.MIN_LINE}
    return sorted(line for line in lines if json.dumps(line, ensure_ascii=False)[1:-1] in text)


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "999_Fake.py").write_text(PROBLEM)
    return tmp_path


def _redacted() -> dict:
    sha = hashlib.sha256(PROBLEM.encode()).hexdigest()
    return kbfixture.redact(_fixture(), PROBLEM, "level2/999_Fake.py", sha, 1)


def test_no_line_of_the_problem_is_left_and_all_of_it_comes_back(checkout):
    original = _fixture()
    assert _long_lines_left(original)  # the check can see a copy
    red = _redacted()
    assert _long_lines_left(red) == []
    assert "task_source" not in red["meta"] and red["meta"]["kernelbench"]["file"] == "level2/999_Fake.py"
    back = kbfixture.restore(red, checkout)
    assert back["events"] == original["events"] and back["meta"]["task_source"] == PROBLEM


def test_another_version_or_no_file_is_refused(checkout):
    red = _redacted()
    (checkout / "level2" / "999_Fake.py").write_text(PROBLEM.replace("0.5", "0.25"))
    with pytest.raises(kbfixture.RestoreError, match="another version"):
        kbfixture.restore(red, checkout)
    (checkout / "level2" / "999_Fake.py").unlink()
    with pytest.raises(kbfixture.RestoreError, match="not in the KernelBench checkout"):
        kbfixture.restore(red, checkout)
