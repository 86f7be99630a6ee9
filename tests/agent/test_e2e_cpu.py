"""End-to-end runs on the CPU backend: scripted model over real HTTP, the real loop, the real
sandbox compiling and evaluating C++ kernels (agent.testing.fixtures)."""

from __future__ import annotations

import pytest

from agent.evaluator import LocalEvaluator
from agent.events import BestChanged, CompileEvent, EvaluationEvent, FileEdit, RewardEvent
from agent.loop import Budgets, run, task_from_trajectory
from agent.testing import scenarios as S
from agent.trajectory import Trajectory

from .conftest import policy_for

pytestmark = pytest.mark.slow


@pytest.fixture
def evaluator(tmp_path_factory):
    return LocalEvaluator(cache_dir=str(tmp_path_factory.getbasetemp() / "kw-cache"))


def statuses(traj):
    """The policy's evaluations (not the loop's confirmations of the best after the last turn)."""
    return [e.result["status"] for e in traj.of_type(EvaluationEvent) if not e.purpose]


def test_good_run_produces_a_verified_candidate_and_a_loadable_trajectory(scripted, softmax_task, evaluator, tmp_path):
    srv = scripted(S.good_run("cpu"))
    steps: list[str] = []
    res = run(
        softmax_task,
        policy_for(srv),
        evaluator,
        Budgets(max_turns=10),
        on_progress=lambda step, detail: steps.append(step),
    )
    traj = res.trajectory
    assert res.reason == "model_finished" and res.verified, traj.of_type(EvaluationEvent)
    assert res.best.files == S.candidate("cpu")
    assert res.best.reward >= 1 and res.best.speedup_vs_eager is not None
    assert traj.of_type(CompileEvent)[0].result["ok"] is True
    assert statuses(traj) == ["ok"]
    assert traj.finished().best_version == res.best.version
    # after the last turn the best was evaluated twice more; the result is the median of the three
    evals = traj.of_type(EvaluationEvent)
    assert [e.purpose for e in evals] == ["", "confirmation", "confirmation", "final"]
    assert all(e.version == res.best.version and e.result["status"] == "ok" for e in evals)
    draws = [e.result["timing"]["candidate"]["median_ms"] for e in evals[:3]]
    assert evals[-1].draws_ms == draws
    # the result is the draw with the median paired speedup vs eager
    speedups = [e.result["speedup_vs_eager"] for e in evals[:3]]
    assert evals[-1].result["speedup_vs_eager"] == sorted(speedups)[1]
    assert evals[-1].result["timing"]["candidate"]["median_ms"] == res.best.candidate_ms
    assert res.best.speedup_vs_eager == evals[-1].result["speedup_vs_eager"]
    assert traj.best().speedup_vs_eager == res.best.speedup_vs_eager  # the last best_changed
    assert "confirmed: median of 3 evaluations" in traj.finished().summary
    # the events carry the paired intervals, and say which best is the confirmed result
    final_speed = evals[-1].result["speed"]
    assert final_speed["vs_eager"]["ci_low"] <= final_speed["vs_eager"]["ratio"] <= final_speed["vs_eager"]["ci_high"]
    assert traj.best().speed == final_speed and traj.best().confirmed
    assert traj.finished().speed == final_speed and traj.finished().confirmed
    assert not traj.of_type(BestChanged)[0].confirmed and traj.of_type(BestChanged)[0].speed is not None
    assert [e.speed for e in traj.of_type(RewardEvent)] == [e.result.get("speed") for e in evals[:3]]
    back = Trajectory.load(traj.save(tmp_path / "t.json"))
    assert back.best().files == res.best.files and back.finished().reason == "model_finished"
    assert steps, "the sandbox's per-step progress reaches on_progress"


class FlakyCandidate(LocalEvaluator):
    """The real sandbox, evaluating from the `broken_from`-th call on a wrong variant of whatever
    it is given: a kernel that passed once and then fails on fresh inputs."""

    def __init__(self, broken_from: int, **defaults):
        super().__init__(**defaults)
        self.calls, self.broken_from = 0, broken_from

    def evaluate(self, task_source, files, options, on_progress=None):
        self.calls += 1
        if self.calls >= self.broken_from:
            files = S.wrong_candidate("cpu")
        return super().evaluate(task_source, files, options, on_progress)


def test_a_best_candidate_that_fails_its_confirmation_is_not_the_result(scripted, softmax_task, tmp_path):
    srv = scripted(S.good_run("cpu"))
    evaluator = FlakyCandidate(broken_from=2, cache_dir=str(tmp_path / "cache"))
    res = run(softmax_task, policy_for(srv), evaluator, Budgets(max_turns=10))
    traj = res.trajectory
    assert statuses(traj) == ["ok"] and not res.verified and res.best is None
    evals = traj.of_type(EvaluationEvent)
    assert [e.purpose for e in evals] == ["", "confirmation"] and evals[1].result["status"] == "incorrect"
    assert traj.finished().best_version is None
    assert "failed its confirmation" in traj.finished().summary
    assert evaluator.calls == 2  # the second confirmation is not needed


def test_no_confirmation_when_the_budget_asks_for_none(scripted, softmax_task, evaluator):
    srv = scripted(S.good_run("cpu"))
    res = run(softmax_task, policy_for(srv), evaluator, Budgets(max_turns=10, confirmations=0))
    assert res.verified and [e.purpose for e in res.trajectory.of_type(EvaluationEvent)] == [""]


def test_run_that_fixes_a_compile_error(scripted, softmax_task, evaluator):
    srv = scripted(S.compile_fix_run())
    res = run(softmax_task, policy_for(srv), evaluator, Budgets(max_turns=10))
    compiles = res.trajectory.of_type(CompileEvent)
    assert compiles[0].result["ok"] is False
    errors = compiles[0].result["errors"]
    assert any("softmax.cpp" in e["file"] and e["line"] for e in errors), errors
    # the model saw the compiler's complaint
    tool_msgs = [m for m in srv.requests[2]["messages"] if m["role"] == "tool"]
    assert "compile FAILED" in tool_msgs[-1]["content"] and "softmax.cpp" in tool_msgs[-1]["content"]
    assert res.verified and statuses(res.trajectory) == ["ok"]
    assert res.best.version == res.trajectory.of_type(FileEdit)[-1].version


def test_incorrect_kernel_then_correct_one(scripted, softmax_task, evaluator):
    srv = scripted(S.incorrect_then_correct_run("cpu"))
    res = run(softmax_task, policy_for(srv), evaluator, Budgets(max_turns=10))
    assert statuses(res.trajectory) == ["incorrect", "ok"]
    rewards = [e.reward for e in res.trajectory.of_type(RewardEvent)]
    assert rewards[0] == -1 and rewards[1] >= 1
    first_eval = [m for m in srv.requests[2]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "status: incorrect" in first_eval and "FAIL" in first_eval
    assert res.verified and res.best.version == 3
    # the best changed once during the run, and once more to its confirmed numbers
    assert [b.version for b in res.trajectory.of_type(BestChanged)] == [3, 3]


def test_result_is_the_best_candidate_not_the_last(scripted, softmax_task, evaluator):
    srv = scripted(S.regression_run())
    res = run(softmax_task, policy_for(srv), evaluator, Budgets(max_turns=10))
    assert statuses(res.trajectory) == ["ok", "incorrect"]
    assert res.best.version == 2 and res.best.files == S.candidate("cpu")
    assert res.trajectory.finished().best_version == 2


def test_text_protocol_run_on_an_endpoint_without_tools(scripted, softmax_task, evaluator):
    srv = scripted({**S.good_run("cpu"), "tools_supported": False})
    pol = policy_for(srv)
    res = run(softmax_task, pol, evaluator, Budgets(max_turns=10))
    assert pol.mode == "text" and res.verified
    assert all("tools" not in body for body in srv.requests[1:])


def test_resumed_run_reaches_a_verified_candidate(scripted, softmax_task, evaluator, tmp_path):
    script = S.incorrect_then_correct_run("cpu")
    first = scripted({"replies": script["replies"][:2]})
    journal = tmp_path / "t.jsonl"
    res1 = run(softmax_task, policy_for(first), evaluator, Budgets(max_turns=2), journal=str(journal))
    assert res1.reason == "max_turns" and not res1.verified
    traj = Trajectory.load(journal)
    second = scripted({"replies": script["replies"][2:]})
    res2 = run(task_from_trajectory(traj), policy_for(second), evaluator, Budgets(max_turns=10), trajectory=traj)
    assert res2.verified and res2.turns == 5
    assert statuses(res2.trajectory) == ["incorrect", "ok"]
    # the resumed model got the earlier turns, including the failed evaluation
    assert "status: incorrect" in str(second.requests[0]["messages"])
