"""`python -m agent optimize` on what people have: any .py file with nn.Module classes (--class,
--init, --inputs) and an ExportedProgram's .pt2 file, as subprocesses on the CPU backend with the
built-in policy; and the clear errors for a missing class, bad JSON, a bad spec and a damaged
.pt2. The tasks are written by agent.module_task / agent.exported_task, the functions the web
form calls."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.events import EvaluationEvent
from agent.exported_task import EXPORTED_MARK
from agent.module_task import WRAPPER_MARK
from agent.trajectory import Trajectory

REPO = Path(__file__).resolve().parents[2]
BLOCK = '''"""A gated block of the user's model: its own name and constructor, no KernelBench functions."""
import torch
from torch import nn


class GatedMLP(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) * torch.sigmoid(x)


class Unused(nn.Module):
    def forward(self, x):
        return x
'''
FAST_EVAL = [
    "--backend",
    "cpu",
    "--policy",
    "builtin",
    "--no-compile-baseline",
    "--confirmations",
    "0",
    "-O",
    "correctness_trials=2",
    "-O",
    "timing_budget_s=0.1",
]


def cli(*args: str, tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KERNELWRIGHT_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "agent", "optimize", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def block(tmp_path: Path) -> Path:
    path = tmp_path / "gated.py"
    path.write_text(BLOCK)
    return path


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            [],
            "is not a KernelBench task (class Model, get_inputs(), get_init_inputs()); it defines nn.Module classes "
            "GatedMLP, Unused: pick one with --class NAME --inputs SPEC",
        ),
        (
            ["--class", "Gated", "--inputs", "float32[4,8]"],
            "'Gated' is not an nn.Module subclass of this file (found: GatedMLP, Unused)",
        ),
        (
            ["--class", "GatedMLP", "--init", "[8, 16", "--inputs", "float32[4,8]"],
            "constructor arguments are JSON, e.g. [64, 256] or {\"channels\": 64}: Expecting ',' delimiter at column 7",
        ),
        (
            ["--class", "GatedMLP", "--init", "[8, 16]", "--inputs", "float32(4,8)"],
            "'float32(4,8)' is not an input spec: write DTYPE[DIMS]",
        ),
        (
            ["--class", "GatedMLP", "--init", "[8, 16]", "--inputs", "int64[4,8] randn"],
            "randn makes floating-point values; an int64 input wants randint(LOW,HIGH)",
        ),
        (
            ["--class", "GatedMLP", "--init", "[8, 16]", "--inputs", "float32[4,8]", "float32[4]"],
            "GatedMLP.forward(x) takes 1 input; 2 specs given",
        ),
        (["--class", "GatedMLP", "--init", "[8, 16]"], "--class GatedMLP needs --inputs"),
        (["--inputs", "float32[4,8]"], "--init and --inputs describe the class given with --class NAME"),
    ],
)
def test_a_module_file_that_cannot_make_a_task_says_why(block, tmp_path, args, expected):
    proc = cli(str(block), *args, "--out", str(tmp_path / "o"), tmp_path=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()  # refused before anything ran


def test_a_damaged_pt2_is_refused_with_what_is_wrong(tmp_path, exported):
    not_zip = tmp_path / "notes.pt2"
    not_zip.write_text("a text file renamed to .pt2\n")
    proc = cli(str(not_zip), "--out", str(tmp_path / "o"), tmp_path=tmp_path)
    assert (
        proc.returncode == 2
        and "not a .pt2 file: an ExportedProgram saved with torch.export.save is a zip archive" in proc.stderr
    )
    truncated = tmp_path / "truncated.pt2"
    truncated.write_bytes(exported.read_bytes()[:2000])
    proc = cli(str(truncated), "--out", str(tmp_path / "o"), tmp_path=tmp_path)
    assert (
        proc.returncode == 2
        and "the .pt2 file is damaged (truncated or not written by torch.export.save)" in proc.stderr
    )
    proc = cli(str(exported), "--class", "Model", "--inputs", "float32[2]", tmp_path=tmp_path)
    assert proc.returncode == 2 and "a .pt2 file brings its module and example inputs" in proc.stderr


@pytest.mark.slow
def test_a_module_class_runs_as_a_kernelbench_task(block, tmp_path):
    out = tmp_path / "run"
    proc = cli(
        str(block),
        "--class",
        "GatedMLP",
        "--init",
        "[32, 64]",
        "--inputs",
        "float32[16,32]",
        "--max-turns",
        "2",
        "--out",
        str(out),
        *FAST_EVAL,
        tmp_path=tmp_path,
        timeout=600,
    )
    assert proc.returncode in (0, 3), proc.stderr + proc.stdout  # 3: ran, nothing verified
    assert "optimising GatedMLP on cpu with builtin" in proc.stderr
    traj = Trajectory.load(out / "trajectory.json")
    task = traj.task()
    assert task.name == "GatedMLP" and task.source.startswith(BLOCK.rstrip("\n")) and WRAPPER_MARK in task.source
    assert "return [32, 64]" in task.source and "torch.randn((16, 32), dtype=torch.float32)" in task.source
    evals = traj.of_type(EvaluationEvent)
    assert evals, [type(e).__name__ for e in traj.events]
    # the sandbox loaded the wrapped class: the candidate was judged against it (not a task error)
    assert not any(r.startswith("task:") for e in evals for r in e.result.get("reasons", [])), evals[0].result


def export_small_model(path: Path, tokens: bool = True) -> None:
    """A scorer over token ids (an int64 input) or, tokens False, over features (the built-in
    policy has no kernel generator for embedding, so the run that evaluates takes this one)."""
    import torch

    class Scorer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 16) if tokens else torch.nn.Identity()
            self.proj = torch.nn.Linear(16, 8)

        def forward(self, x, scale):
            return torch.tanh(self.proj(self.embed(x))) * scale

    first = torch.randint(0, 50, (4, 6)) if tokens else torch.randn(4, 6, 16)
    torch.export.save(torch.export.export(Scorer().eval(), (first, torch.rand(4, 6, 1))), str(path))


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    path = tmp_path / "scorer.pt2"
    export_small_model(path)
    return path


@pytest.mark.slow
def test_a_pt2_file_runs_from_the_file_alone(tmp_path):
    exported = tmp_path / "features.pt2"
    export_small_model(exported, tokens=False)
    out = tmp_path / "run"
    proc = cli(str(exported), "--max-turns", "2", "--out", str(out), *FAST_EVAL, tmp_path=tmp_path, timeout=600)
    assert proc.returncode in (0, 3), proc.stderr + proc.stdout
    traj = Trajectory.load(out / "trajectory.json")
    task = traj.task()
    assert task.name == "features" and EXPORTED_MARK in task.source
    assert "Recorded inputs: x: float32[4,6,16]; scale: float32[4,6,1]" in task.source
    assert "def forward(self, x, scale):" in task.source
    blob = re.search(r'_KW_PT2 = """\n(.*?)"""', task.source, re.S).group(1)
    assert hashlib.sha256(base64.b64decode(blob)).digest() == hashlib.sha256(exported.read_bytes()).digest()
    evals = traj.of_type(EvaluationEvent)  # the sandbox loaded the program and judged a candidate against it
    assert evals, [getattr(e, "content", "")[:300] for e in traj.events]
    assert not any(r.startswith("task:") for e in evals for r in e.result.get("reasons", [])), evals[0].result


def test_the_pt2_task_computes_what_the_program_computes(exported):
    """The task source run here (a test may load its own file): Model is the program, and
    get_inputs draws new values of the recorded shapes and dtypes, integers within the
    example's range."""
    import torch

    from agent.exported_task import exported_task_source

    namespace: dict = {}
    exec(compile(exported_task_source(exported.read_bytes(), "scorer"), "task.py", "exec"), namespace)
    program = torch.export.load(str(exported))
    torch.manual_seed(0)
    first = namespace["get_inputs"]()
    torch.manual_seed(0)
    assert all(torch.equal(a, b) for a, b in zip(first, namespace["get_inputs"](), strict=True))  # seeded like any task
    tokens, scale = first
    example_tokens = program.example_inputs[0][0]
    assert tokens.dtype == torch.int64 and tokens.shape == (4, 6) and scale.shape == (4, 6, 1)
    assert example_tokens.min() <= tokens.min() and tokens.max() <= example_tokens.max()
    assert not torch.equal(tokens, example_tokens)  # random draws, not the recorded values
    model = namespace["Model"](*namespace["get_init_inputs"]()).eval()  # eval() works on an exported program's task
    assert torch.equal(model(tokens, scale), program.module()(tokens, scale))
    assert sorted(k.split(".", 1)[1] for k in model.state_dict()) == sorted(program.state_dict)
