"""A synthetic trajectory built from the real event and result dataclasses, for tests and for the
page-load benchmark (a 200-turn job). Its numbers are made up and say so (device "synthetic");
nothing here is ever shown as a measurement: it only feeds code paths that render and store.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.events import SCHEMA_VERSION as TRAJECTORY_SCHEMA
from agent.events import (
    BestChanged,
    CompileEvent,
    ErrorEvent,
    EvaluationEvent,
    FileEdit,
    Finished,
    ModelMessage,
    ProfileEvent,
    RewardEvent,
    TaskEvent,
    ToolCall,
    ToolResult,
    TurnStarted,
)
from sandbox.schema import (
    CompileError,
    CompileResult,
    EvalResult,
    ProfileRow,
    Roofline,
    Stats,
    Status,
    Timing,
    TrialResult,
    Verdict,
    milestone_reward,
)

SOFTMAX_TASK = '''"""Row softmax (synthetic sample)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
'''


def _stats(ms: float) -> Stats:
    return Stats(
        median_ms=ms, min_ms=ms * 0.95, max_ms=ms * 1.1, mean_ms=ms * 1.01, std_ms=ms * 0.02, spread=0.05, trials=50
    )


def evaluation(turn: int, ok: bool, candidate_ms: float, *, status: Status | None = None) -> EvalResult:
    eager, compiled = 0.20, 0.16
    speed_e, speed_c = eager / candidate_ms, compiled / candidate_ms
    status = status or (Status.OK if ok else Status.INCORRECT)
    correct = status == Status.OK
    trials = [
        TrialResult(
            index=i,
            kind="random",
            passed=correct or i < 2,
            max_abs_error=1e-6 if correct else 0.3,
            total=262144,
            mismatched=0 if correct else 1200,
        )
        for i in range(5)
    ]
    return EvalResult(
        status=status,
        verdict=Verdict.PASS if correct else Verdict.FAIL,
        reasons=[] if correct else ["trial 2: 1200 of 262144 elements outside tolerance"],
        backend="cpu",
        device="synthetic",
        torch_version="0",
        task_hash="sample",
        candidate_hash=f"c{turn}",
        options={"backend": "cpu", "torch_ops": "forbid", "preset": "default"},
        compile=CompileResult(ok=True, mode="cxx", seconds=0.8),
        trials=trials,
        timing=Timing(
            candidate=_stats(candidate_ms),
            eager=_stats(eager),
            compile=_stats(compiled),
            clock="perf_counter",
            input_sets=3,
        ),
        speedup_vs_eager=speed_e if correct else None,
        speedup_vs_compile=speed_c if correct else None,
        reward=milestone_reward(correct, speed_e, speed_c),
        profile=[
            ProfileRow(name="softmax_rows", calls=50, total_ms=candidate_ms * 50, share=0.9),
            ProfileRow(name="aten::empty_like", calls=50, total_ms=candidate_ms * 5, share=0.1),
        ],
        roofline=Roofline(
            device="synthetic",
            flops=5 * 256 * 1024,
            min_bytes=2 * 4 * 256 * 1024,
            peak_bandwidth_gbs=50.0,
            peak_tflops=1.0,
            floor_ms=0.04,
            bound="memory",
            candidate_ms=candidate_ms,
            fraction_of_sol=0.04 / candidate_ms,
        ),
        duration_s=2.0,
    )


KERNEL = """// softmax_rows: fuses max, exp, sum and divide of one row; reads and writes each element once.
extern "C" int softmax_rows(const float* x, float* out, long rows, long cols, void* stream) {{
    for (long r = 0; r < rows; ++r) {{ /* version {v} */ }}
    return 0;
}}
"""


def turn_events(
    turn: int, *, fail: bool = False, compile_error: bool = False, best_ms: list[float] | None = None
) -> list[Any]:
    """Events of one turn: a message, a write_file, an evaluate (or a failing compile)."""
    v = turn
    path = "kernels/softmax.cpp"
    old = KERNEL.format(v=v - 1) if turn > 1 else ""
    new = KERNEL.format(v=v)
    diff = f"--- a/{path}\n+++ b/{path}\n@@ -3 +3 @@\n-    /* version {v - 1} */\n+    /* version {v} */\n"
    events: list[Any] = [
        TurnStarted(turn=turn),
        ModelMessage(
            turn=turn,
            content=f"Turn {turn}: fuse the row max and sum <script>alert('x')</script>",
            prompt_tokens=1000 + turn,
            completion_tokens=200,
            cost_usd=0.001,
        ),
        ToolCall(turn=turn, call_id=f"w{turn}", name="write_file", arguments={"path": path, "content": new}),
        FileEdit(
            turn=turn,
            path=path,
            diff=diff
            if old
            else f"--- /dev/null\n+++ b/{path}\n" + "".join("+" + ln + "\n" for ln in new.splitlines()),
            content=new,
            version=v,
        ),
        ToolResult(turn=turn, call_id=f"w{turn}", name="write_file", content=f"wrote {path}"),
        ToolCall(turn=turn, call_id=f"e{turn}", name="evaluate", arguments={}),
    ]
    if compile_error:
        cres = CompileResult(
            ok=False,
            mode="cxx",
            errors=[CompileError(file=path, line=3, column=5, message="expected ';' before '}' token")],
            log=f"{path}:3:5: error: expected ';' before '}}' token\n<b>not html</b>",
        )
        events.append(CompileEvent(turn=turn, version=v, result=dataclasses.asdict(cres)))
        res = EvalResult(status=Status.COMPILE_ERROR, verdict=Verdict.FAIL, reasons=["compile failed"], compile=cres)
        events.append(EvaluationEvent(turn=turn, version=v, result=res.to_dict()))
        events.append(RewardEvent(turn=turn, version=v, reward=-1))
        events.append(ToolResult(turn=turn, call_id=f"e{turn}", name="evaluate", content="compile error", ok=False))
        return events
    ms = 0.25 / (1 + 0.15 * turn)
    res = evaluation(turn, not fail, ms)
    events.append(EvaluationEvent(turn=turn, version=v, result=res.to_dict()))
    events.append(
        RewardEvent(
            turn=turn,
            version=v,
            reward=res.reward,
            speedup_vs_eager=res.speedup_vs_eager,
            speedup_vs_compile=res.speedup_vs_compile,
        )
    )
    if not fail and best_ms is not None and (not best_ms or ms < best_ms[0]):
        best_ms[:] = [ms]
        events.append(
            BestChanged(
                turn=turn,
                version=v,
                reward=res.reward,
                speedup_vs_eager=res.speedup_vs_eager,
                speedup_vs_compile=res.speedup_vs_compile,
                files={"model_new.py": "import kwrt\n# ModelNew ...\n", path: new},
            )
        )
    events.append(
        ToolResult(
            turn=turn, call_id=f"e{turn}", name="evaluate", content=f"status {res.status.value}, reward {res.reward}"
        )
    )
    if turn % 5 == 0 and not fail:
        events.append(
            ProfileEvent(
                turn=turn,
                version=v,
                rows=[dataclasses.asdict(r) for r in res.profile],
                roofline=dataclasses.asdict(res.roofline),
                text="profile",
            )
        )
    return events


def build(turns: int = 5, name: str = "row softmax (synthetic)") -> dict[str, Any]:
    """A trajectory file dict of `turns` turns: turn 2 fails correctness, turn 3 fails to compile."""
    events: list[Any] = [
        TaskEvent(
            name=name,
            source=SOFTMAX_TASK,
            task_hash="sample",
            backend="cpu",
            options={"backend": "cpu", "torch_ops": "forbid", "preset": "default"},
            policy="builtin",
        )
    ]
    best: list[float] = []
    for t in range(1, turns + 1):
        events += turn_events(t, fail=(t == 2), compile_error=(t == 3), best_ms=best)
    events.append(ErrorEvent(turn=turns, kind="budget", message="budget reached: max_turns"))
    last_best = next((e for e in reversed(events) if isinstance(e, BestChanged)), None)
    events.append(
        Finished(
            turn=turns,
            reason="max_turns",
            best_version=last_best.version if last_best else None,
            best_reward=last_best.reward if last_best else None,
            speedup_vs_eager=last_best.speedup_vs_eager if last_best else None,
            speedup_vs_compile=last_best.speedup_vs_compile if last_best else None,
            summary="synthetic sample",
        )
    )
    return {"schema": TRAJECTORY_SCHEMA, "events": [e.to_dict() for e in events]}
