"""One scripted run on the CUDA backend (run by the lead on the H200): the CUDA softmax fixture
through the real loop and sandbox. Uses the scripted HTTP server when `openai` is installed,
else replays the same script in-process (the GPU host has no openai package)."""

from __future__ import annotations

import importlib.util

import pytest

from agent.evaluator import LocalEvaluator
from agent.events import EvaluationEvent
from agent.loop import Budgets, run
from agent.task import task_from_file
from agent.testing import scenarios as S
from agent.testing.replay import ScriptPolicy

from .conftest import SOFTMAX_TASK

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


def test_scripted_cuda_run_is_verified(tmp_path):
    task = task_from_file(SOFTMAX_TASK, "cuda")
    script = S.incorrect_then_correct_run("cuda")
    evaluator = LocalEvaluator(cache_dir=str(tmp_path / "cache"))
    if importlib.util.find_spec("openai") is not None:
        from agent.testing.scripted_server import ScriptedServer

        from .conftest import policy_for

        with ScriptedServer(script) as srv:
            res = run(task, policy_for(srv), evaluator, Budgets(max_turns=10))
    else:
        res = run(task, ScriptPolicy(script), evaluator, Budgets(max_turns=10))
    evals = [e for e in res.trajectory.of_type(EvaluationEvent) if not e.purpose]
    assert [e.result["status"] for e in evals] == ["incorrect", "ok"], [e.result["reasons"] for e in evals]
    assert res.verified and res.best.files == S.candidate("cuda")
    ok = evals[-1].result
    assert ok["backend"] == "cuda" and ok["audit"]["custom_kernel_ran"]
    print(
        f"cuda softmax: reward {res.best.reward}, {res.best.speedup_vs_eager}x vs eager, "
        f"{res.best.speedup_vs_compile}x vs torch.compile on {ok['device']}"
    )
