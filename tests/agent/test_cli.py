"""The CLI against the scripted server running as its own process, on the CPU backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.events import ProfileEvent
from agent.testing.scenarios import candidate
from agent.trajectory import Trajectory

from .conftest import SOFTMAX_TASK

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server_url():
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.testing.scripted_server", "--scenario", "softmax-cpu", "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "scripted OpenAI server on http://127.0.0.1:" in line, line
        yield line.split(" on ")[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_optimize_writes_best_files_and_a_loadable_trajectory(server_url, tmp_path):
    out = tmp_path / "out"
    env_cmd = [
        sys.executable,
        "-m",
        "agent",
        "optimize",
        str(SOFTMAX_TASK),
        "--backend",
        "cpu",
        "--base-url",
        server_url,
        "--model",
        "scripted-model",
        "--out",
        str(out),
        "--no-compile-baseline",
        "--max-turns",
        "8",
        "--preset",
        "kernelbench",
        "-O",
        "correctness_trials=2",
        "-O",
        "timing_budget_s=0.1",
    ]
    proc = subprocess.run(
        env_cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KERNELWRIGHT_CACHE": str(tmp_path / "c")},
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "best verified candidate" in proc.stdout and "speedup vs eager" in proc.stdout
    assert "] " in proc.stderr and "finished: model_finished" in proc.stderr  # progress bar lines
    traj = Trajectory.load(out / "trajectory.json")
    assert traj.best() is not None and traj.finished().reason == "model_finished"
    profiles = traj.of_type(ProfileEvent)
    assert profiles and any("softmax_rows" in row["name"] for row in profiles[0].rows)
    for rel, text in candidate("cpu").items():
        assert (out / "best" / rel).read_text() == text
    assert len(Trajectory.load(out / "trajectory.jsonl")) == len(traj)
    show = subprocess.run(
        [sys.executable, "-m", "agent", "show", str(out / "trajectory.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert show.returncode == 0 and "best: version" in show.stdout


def test_unreachable_endpoint_fails_with_a_clear_error(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent",
            "optimize",
            str(SOFTMAX_TASK),
            "--backend",
            "cpu",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--out",
            str(tmp_path / "o"),
            "--max-turns",
            "2",
            "--retries",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 1
    assert "cannot reach the model endpoint" in proc.stderr


def test_resume_continues_an_interrupted_run(scripted, softmax_task, tmp_path):
    from agent.events import ToolCall
    from agent.loop import Budgets, run
    from agent.testing.scenarios import call, reply

    from .conftest import policy_for

    journal = tmp_path / "first.jsonl"
    first = scripted(
        {"replies": [reply(call("write_file", path="notes.md", content="plan\n")), reply(call("list_files"))]}
    )

    def die_on_list(e):
        if isinstance(e, ToolCall) and e.name == "list_files":
            raise KeyboardInterrupt  # the process is killed while the tool runs

    with pytest.raises(KeyboardInterrupt):
        run(softmax_task, policy_for(first), None, Budgets(max_turns=5), on_event=die_on_list, journal=str(journal))
    second = scripted(
        {"replies": [reply(call("read_file", path="notes.md")), reply(call("finish", summary="resumed"))]}
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent",
            "optimize",
            "--resume",
            str(journal),
            "--base-url",
            second.url,
            "--model",
            "scripted-model",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 3, proc.stderr  # finished, but nothing was evaluated: no verified candidate
    assert "no verified candidate" in proc.stdout
    traj = Trajectory.load(out / "trajectory.json")
    assert traj.finished().reason == "model_finished" and traj.finished().summary == "resumed"
    assert traj.turns() == 4
    read = [e for e in traj.events if getattr(e, "name", "") == "read_file" and e.type == "tool_result"]
    assert read[0].content == "plan\n"
