"""benchmarks.case_studies --kernelbench: a KernelBench problem becomes a gallery fixture that
names its file and version. The problem here is a stand-in written for the test, laid out as a
KernelBench checkout is (level3/<n>_<Name>.py); the run is real (policy, loop, sandbox, CPU)."""

from __future__ import annotations

import hashlib
import json

import pytest

from agent.trajectory import Trajectory
from benchmarks import case_studies, kbfixture

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


batch_size = 8
features = 32


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
"""


@pytest.mark.slow  # 10-20 s on 2 cores: the slow tier (./kw test -m slow)
def test_a_kernelbench_problem_becomes_a_fixture_that_names_its_file_and_version_and_holds_none_of_it(tmp_path, capsys):
    kb = tmp_path / "KernelBench"
    (kb / "level3").mkdir(parents=True)
    problem = kb / "level3" / "7_LinearReluResidual.py"
    problem.write_text(PROBLEM)
    out = tmp_path / "out"
    rc = case_studies.main(
        ["--backend", "cpu", "--out", str(out), "--kernelbench", str(kb), "--cases", "3/7", "--max-turns", "4"]
    )
    assert rc == 0
    raw = (out / "kb3_7_LinearReluResidual.json").read_text()
    data = json.loads(raw)
    assert data["meta"]["kernelbench"] | {"fragments": 0} == {
        "file": "level3/7_LinearReluResidual.py",
        "sha256": hashlib.sha256(problem.read_bytes()).hexdigest(),
        "shrink": 1,
        "fragments": 0,
    }
    long_lines = [line.strip() for line in PROBLEM.splitlines() if len(line.strip()) >= kbfixture.MIN_LINE]
    assert long_lines and not any(json.dumps(line)[1:-1] in raw for line in long_lines)  # none of its text
    assert "task_source" not in data["meta"]
    traj = Trajectory.from_dict(kbfixture.restore(data, kb))
    assert traj.task().name == "7_LinearReluResidual" and traj.task().source == PROBLEM  # the name KernelBench gives it
    summary = json.loads((out / "summary.json").read_text())
    assert [c["name"] for c in summary["cases"]] == ["kb3_7_LinearReluResidual"] and summary["cases"][0]["correct"]
    assert "kb3_7_LinearReluResidual" in capsys.readouterr().out


def test_kernelbench_cases_must_be_named():
    try:
        case_studies.case_paths(case_studies.TASKS_DIR, [])
    except SystemExit as exc:
        assert "--cases level/number" in str(exc)
    else:
        raise AssertionError("no cases named with --kernelbench: expected a clear error")
