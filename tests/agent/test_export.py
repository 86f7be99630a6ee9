"""`python -m agent export`: SFT and RL rows from trajectories (agent.export)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent import export
from agent.events import EvaluationEvent, RewardEvent
from agent.trajectory import Trajectory
from sandbox.schema import EvalResult, Speed, Speedup, Status, Verdict
from webapp.jobs.sample_trajectory import build  # plain dataclasses, no Django

ROOT = Path(__file__).resolve().parents[2]


def sample_run(tmp_path: Path, name: str = "row softmax (synthetic)", turns: int = 5) -> Path:
    folder = tmp_path / name.replace(" ", "_")
    Trajectory.from_dict(build(turns, name)).save(folder / "trajectory.json")
    return folder


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent", "export", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_sft_row_is_the_conversation_with_its_tool_calls(tmp_path):
    traj = Trajectory.load(sample_run(tmp_path) / "trajectory.json")
    row = export.sft_row(export.Run(traj, "here"))
    assert row["schema"] == export.DATASET_SCHEMA and row["kind"] == "sft"
    msgs = row["messages"]
    assert [m["role"] for m in msgs[:2]] == ["system", "user"]
    assert traj.task().source.strip() in msgs[1]["content"]
    calls = [c for m in msgs if m["role"] == "assistant" for c in m["tool_calls"] or []]
    assert [c["function"]["name"] for c in calls] == ["write_file", "evaluate"] * 5
    assert json.loads(calls[0]["function"]["arguments"])["path"] == "kernels/softmax.cpp"
    answered = {m["tool_call_id"]: m["content"] for m in msgs if m["role"] == "tool"}
    assert set(answered) == {c["id"] for c in calls}
    assert answered["e3"] == "compile error"
    assert {t["function"]["name"] for t in row["tools"]} >= {"write_file", "evaluate", "finish"}
    assert row["run"]["best_reward"] == traj.best().reward and row["run"]["turns"] == 5


def test_rl_rows_hold_the_state_before_each_turn_and_its_reward(tmp_path):
    traj = Trajectory.load(sample_run(tmp_path) / "trajectory.json")
    rows = list(export.rl_rows(export.Run(traj, "here")))
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and [r["last"] for r in rows] == [False] * 4 + [True]
    assert rows[0]["state"]["files"] == [] and rows[0]["state"]["last_evaluation"] is None
    assert "version 1" in rows[1]["state"]["files"][0]["content"] and rows[1]["state"]["version"] == 1
    assert rows[1]["state"]["last_results"][-1]["content"].startswith("status ok")
    assert [r["reward"] for r in rows] == [e.reward for e in traj.of_type(RewardEvent)]
    assert rows[2]["evaluation"]["status"] == "compile_error" and rows[2]["reward"] == -1
    assert rows[3]["state"]["last_evaluation"]["status"] == "compile_error"
    assert rows[0]["action"]["tool_calls"][1]["name"] == "evaluate"


def _speedup(low: float) -> Speedup:
    return Speedup(baseline="eager", ratio=low + 0.1, ci_low=low, ci_high=low + 0.2, rounds=8, verdict="faster")


def test_the_reward_is_the_sandbox_rule_applied_to_the_evaluation():
    fast = EvalResult(
        status=Status.OK, verdict=Verdict.PASS, reward=1, speed=Speed(vs_eager=_speedup(1.3), vs_compile=_speedup(1.2))
    )
    assert export.milestone(fast.to_dict()) == 3
    fast.speed.noisy = True
    assert export.milestone(fast.to_dict()) == 1
    assert export.milestone(EvalResult(status=Status.INCORRECT, verdict=Verdict.FAIL).to_dict()) == -1
    assert export.milestone({"schema": "kernelwright.eval/1", "reward": 2}) == 2  # older results: as recorded


def test_cli_writes_jsonl_and_filters_runs(tmp_path):
    runs = tmp_path / "runs"
    sample_run(runs, "row softmax")
    sample_run(runs, "layer norm", turns=2)  # turn 2 fails: its best reward is turn 1's
    out = tmp_path / "rl.jsonl"
    done = cli(str(runs), "--format", "rl", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["run"]["task"] for r in rows}) == ["layer norm", "row softmax"] and len(rows) == 7
    done = cli(str(runs), "--format", "sft", "--out", str(out), "--task", "softmax")
    assert done.returncode == 0 and "wrote 1 sft row(s)" in done.stdout
    assert [json.loads(line)["run"]["task"] for line in out.read_text().splitlines()] == ["row softmax"]
    done = cli(str(runs), "--format", "sft", "--out", str(out), "--since", "2999-01-01")
    assert done.returncode == 0 and "wrote 0 sft row(s)" in done.stdout


def test_cli_says_what_is_wrong_with_bad_input(tmp_path):
    run = sample_run(tmp_path)
    done = cli(str(run), "--format", "sft", "--out", str(tmp_path / "x.csv"))
    assert done.returncode == 2 and "must end in .jsonl or .parquet" in done.stderr
    done = cli(str(tmp_path / "nowhere"), "--format", "sft", "--out", str(tmp_path / "x.jsonl"))
    assert done.returncode == 2 and "no such file or folder" in done.stderr
    (tmp_path / "junk.json").write_text("[1, 2]")
    done = cli(str(tmp_path / "junk.json"), "--format", "rl", "--out", str(tmp_path / "x.jsonl"))
    assert done.returncode == 2 and "not a trajectory" in done.stderr
    done = cli(str(run), "--format", "sft", "--out", str(tmp_path / "x.jsonl"), "--since", "yesterday")
    assert done.returncode == 2 and "not an ISO date" in done.stderr


def test_parquet_keeps_the_chat_structure(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    run = sample_run(tmp_path)
    for fmt in export.FORMATS:
        out = tmp_path / f"{fmt}.parquet"
        done = cli(str(run), "--format", fmt, "--out", str(out))
        assert done.returncode == 0, done.stderr
        table = pq.read_table(out)
        first = table.to_pylist()[0]
        assert first["schema"] == export.DATASET_SCHEMA
        if fmt == "sft":
            assert str(table.schema.field("messages").type).startswith("list<element: struct<role: string")
            assert first["messages"][2]["tool_calls"][0]["function"]["name"] == "write_file"
            assert json.loads(first["tools"])[0]["type"] == "function"
        else:
            assert table.num_rows == 5 and json.loads(first["evaluation"])["status"] == "ok"


@pytest.mark.slow
def test_a_real_run_exports_the_rewards_the_sandbox_gave(scripted, softmax_task, tmp_path):
    """The scripted model over real HTTP, the real loop and sandbox (C++ kernels on the cpu)."""
    from agent.evaluator import LocalEvaluator
    from agent.loop import Budgets, run
    from agent.testing import scenarios as S

    from .conftest import policy_for

    res = run(
        softmax_task,
        policy_for(scripted(S.incorrect_then_correct_run("cpu"))),
        LocalEvaluator(cache_dir=str(tmp_path / "cache")),
        Budgets(max_turns=10, confirmations=0),
    )
    traj = res.trajectory
    rows = list(export.rows([export.Run(traj, "real")], "rl"))
    evaluated = [r for r in rows if r["evaluation"] is not None]
    policy_evals = [e for e in traj.of_type(EvaluationEvent) if not e.purpose]
    assert [r["reward"] for r in evaluated] == [e.result["reward"] for e in policy_evals]
    assert [r["reward"] for r in evaluated][0] == -1 and evaluated[-1]["reward"] >= 1
    sft = export.sft_row(export.Run(traj, "real"))
    assert sft["messages"][-1]["role"] == "tool" and sft["run"]["best_reward"] == res.best.reward
