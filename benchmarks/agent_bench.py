"""Benchmark: the agent loop's own overhead per turn, excluding model and sandbox time.

    python -m benchmarks.agent_bench [--turns 200]

What is measured: RunResult.overhead_ms, i.e. each turn's wall time minus the time inside
policy.next_action and inside the evaluator: recording events (with the JSONL journal on
disk), workspace edits and diffs, tool dispatch, trimming, best tracking, on_event callbacks.
Target: < 50 ms per turn.

FOR THIS MEASUREMENT ONLY the sandbox is replaced by `InstantEvaluator`, which returns a fixed,
made-up "correct" result without running anything, and the model by `ReplayPolicy`, which
replays canned actions; both exist so that only the loop's own time is left. They are never used
for real runs. Separately, the OpenAI policy's client-side work per request (rendering the
conversation, estimating tokens, compacting) is timed on a long synthetic conversation.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.loop import Budgets, run
from agent.policy import Action, Observation, Policy, TaskInfo, ToolInvocation, Usage
from agent.testing.scenarios import candidate


class InstantEvaluator:
    """BENCHMARK ONLY: answers instantly with a fixed correct result; evaluates nothing."""

    def __init__(self) -> None:
        self.calls = 0

    def _result(self, files: dict[str, str]) -> Any:
        from sandbox.schema import CompileResult, EvalResult, Stats, Status, Timing, Verdict

        self.calls += 1
        ms = 1.0 / (1 + self.calls % 7)
        st = Stats(ms, ms, ms, ms, 0.0, 0.0, 20)
        slow = Stats(2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 20)
        return EvalResult(
            status=Status.OK,
            verdict=Verdict.PASS,
            backend="cpu",
            compile=CompileResult(ok=True, mode="cxx"),
            timing=Timing(candidate=st, eager=slow, compile=slow, clock="perf_counter"),
            speedup_vs_eager=2.0 / ms,
            speedup_vs_compile=2.0 / ms,
            reward=3,
        )

    def compile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> Any:
        from sandbox.schema import CompileResult

        return CompileResult(ok=True, mode="cxx")

    def evaluate(
        self, task_source: str, files: dict[str, str], options: dict[str, Any], on_progress: Any = None
    ) -> Any:
        return self._result(files)

    def profile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> Any:
        return self._result(files)


class ReplayPolicy(Policy):
    """BENCHMARK ONLY: cycles through edit, compile and evaluate actions like a busy model."""

    name = "replay"

    def reset(self, task: TaskInfo, tool_specs: list[dict[str, Any]], history: list[Any]) -> None:
        self.n = 0
        self.files = candidate("cpu")

    def next_action(self, observations: list[Observation]) -> Action:
        self.n += 1
        k = "kernels/softmax.cpp"
        kind = self.n % 4
        if self.n == 1:
            calls = [
                ToolInvocation("write_file", {"path": p, "content": c}, f"c{self.n}-{i}")
                for i, (p, c) in enumerate(sorted(self.files.items()))
            ]
        elif kind == 0:
            calls = [
                ToolInvocation(
                    "write_file", {"path": k, "content": self.files[k] + f"\n// rev {self.n}\n"}, f"c{self.n}"
                )
            ]
        elif kind == 1:
            calls = [
                ToolInvocation("read_file", {"path": k}, f"c{self.n}"),
                ToolInvocation("compile", {}, f"d{self.n}"),
            ]
        else:
            calls = [ToolInvocation("evaluate", {}, f"c{self.n}")]
        return Action(message=f"step {self.n}", tool_calls=calls, usage=Usage(1000, 100, 0.001))


def bench_loop(turns: int, journal: bool) -> list[float]:
    task = TaskInfo("bench", _task_source(), "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        res = run(
            task,
            ReplayPolicy(),
            InstantEvaluator(),
            Budgets(max_turns=turns),
            on_event=lambda e: None,
            journal=str(Path(tmp) / "t.jsonl") if journal else None,
        )
        if journal:
            res.trajectory.save(Path(tmp) / "t.json")
    return res.overhead_ms


def bench_policy_render(turns: int) -> tuple[float, float]:
    """ms per request of OpenAIPolicy's client-side work at `turns` turns of history."""
    from agent.events import ModelMessage, ToolCall, ToolResult, TurnStarted
    from agent.openai_policy import OpenAIPolicy

    task = TaskInfo("bench", _task_source(), "cpu")
    p = OpenAIPolicy(base_url="http://127.0.0.1:9/v1", model="bench", context_window=32_768)
    history: list[Any] = []
    big = candidate("cpu")["kernels/softmax.cpp"]
    for t in range(1, turns + 1):
        history += [
            TurnStarted(turn=t),
            ModelMessage(turn=t, content="trying"),
            ToolCall(
                turn=t, call_id=f"c{t}", name="write_file", arguments={"path": "kernels/softmax.cpp", "content": big}
            ),
            ToolResult(turn=t, call_id=f"c{t}", name="write_file", content="log line\n" * 300),
        ]
    from agent.tools import tool_specs

    p.reset(task, tool_specs(), history)
    times = []
    for _ in range(20):
        p.window.reset()
        t0 = time.perf_counter()
        p._fit_messages()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times)


def _task_source() -> str:
    return """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.agent_bench")
    ap.add_argument("--turns", type=int, default=200)
    args = ap.parse_args(argv)
    print(
        "agent loop overhead per turn (model and sandbox time excluded; InstantEvaluator + ReplayPolicy, "
        "benchmark-only stand-ins)"
    )
    for journal in (False, True):
        ms = bench_loop(args.turns, journal)
        q = statistics.quantiles(ms, n=20)
        print(
            f"  {args.turns} turns, journal {'on ' if journal else 'off'}: median {statistics.median(ms):.3f} ms, "
            f"p95 {q[-1]:.3f} ms, max {max(ms):.3f} ms  (target < 50 ms)"
        )
    for turns in (30, 200):
        med, mx = bench_policy_render(turns)
        print(
            f"  OpenAIPolicy request preparation at {turns} turns of history (render + compaction): "
            f"median {med:.3f} ms, max {mx:.3f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
