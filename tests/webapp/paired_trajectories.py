"""Trajectories whose evaluations carry paired-timing results (kernelwright.eval/2) judged by the
sandbox's own code (sandbox.protocol.judge_speed: the bootstrap interval, the noise check, the
milestone reward), as the agent loop records a run: policy evaluations, then the best candidate's
confirmations and its `final` evaluation. Only the per-round times are chosen by the test.
"""

from __future__ import annotations

from typing import Any

from agent.events import SCHEMA_VERSION, BestChanged, EvaluationEvent, Finished, RewardEvent, TaskEvent, TurnStarted
from sandbox.cache import sha256_text
from sandbox.options import EvalOptions
from sandbox.protocol import judge_speed
from sandbox.schema import Round, Stats
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, evaluation


def rounds_for(
    ratio_eager: float, ratio_compile: float, n: int = 12, jitter: float = 0.02, eager_ms: float = 0.2
) -> list[Round]:
    """`n` rounds in which the candidate is `ratio_*` times faster than each baseline, each round
    moved by up to +-jitter (a deterministic zigzag)."""
    out = []
    for i in range(n):
        wobble = 1 + jitter * (((i * 7) % 5) - 2) / 2
        cand = eager_ms / ratio_eager * wobble
        out.append(
            Round(
                order=["eager", "compile", "candidate"],
                eager_ms=eager_ms * (1 + jitter * ((i % 3) - 1) / 4),
                compile_ms=cand * ratio_compile / wobble,
                candidate_ms=cand,
            )
        )
    return out


def eval2(
    version: int, ratio_eager: float, ratio_compile: float, *, noisy: bool = False, n: int = 12
) -> dict[str, Any]:
    """A correct candidate's result with the sandbox's paired verdict over made-up round times."""
    rounds = rounds_for(ratio_eager, ratio_compile, n)
    if noisy:  # the eager baseline moves 60% between rounds: above the 25% noise limit
        rounds[0].eager_ms *= 1.6
    speed, reward = judge_speed(rounds, ["eager", "compile", "candidate"], EvalOptions(backend="cpu"))
    res = evaluation(version, True, rounds[0].candidate_ms)
    res.task_hash = sha256_text(SOFTMAX_TASK)
    res.timing.rounds = rounds
    res.timing.mode = "paired"
    for key in ("eager", "compile", "candidate"):
        ms = sorted(getattr(r, f"{key}_ms") for r in rounds)[n // 2]
        setattr(
            res.timing,
            key,
            Stats(
                median_ms=ms, min_ms=ms * 0.95, max_ms=ms * 1.1, mean_ms=ms, std_ms=ms * 0.02, spread=0.05, trials=n * 5
            ),
        )
    res.speed, res.reward = speed, reward
    res.speedup_vs_eager, res.speedup_vs_compile = speed.vs_eager.ratio, speed.vs_compile.ratio
    return res.to_dict()


def _scored(turn: int, version: int, result: dict[str, Any], purpose: str = "") -> list[Any]:
    return [
        EvaluationEvent(turn=turn, version=version, result=result, purpose=purpose),
        RewardEvent(
            turn=turn,
            version=version,
            reward=result["reward"],
            speedup_vs_eager=result["speedup_vs_eager"],
            speedup_vs_compile=result["speedup_vs_compile"],
        ),
    ]


def _best(turn: int, version: int, result: dict[str, Any]) -> BestChanged:
    return BestChanged(
        turn=turn,
        version=version,
        reward=result["reward"],
        speedup_vs_eager=result["speedup_vs_eager"],
        speedup_vs_compile=result["speedup_vs_compile"],
        files={"model_new.py": f"# version {version}\n"},
    )


def confirmed_run(
    final: dict[str, Any], *, first: dict[str, Any] | None = None, confirmed: bool = True
) -> dict[str, Any]:
    """Turn 1 finds version 1 (`first`), turn 2 version 2 (a luckier draw, 2.4x), then version 2
    is evaluated twice more and `final` (the median draw) is the result. Without `confirmed` the
    run ends after turn 2 (stopped: no confirmation)."""
    first = first or eval2(1, 1.3, 1.1)
    lucky = eval2(2, 2.4, 2.0)
    events: list[Any] = [
        TaskEvent(
            name="row softmax (paired)",
            source=SOFTMAX_TASK,
            task_hash=sha256_text(SOFTMAX_TASK),
            backend="cpu",
            options={"backend": "cpu", "preset": "default", "torch_ops": "forbid"},
            policy="builtin",
        )
    ]
    events += [TurnStarted(turn=1), *_scored(1, 1, first), _best(1, 1, first)]
    events += [TurnStarted(turn=2), *_scored(2, 2, lucky), _best(2, 2, lucky)]
    best = lucky
    if confirmed:
        low = eval2(2, max(final["speedup_vs_eager"] * 0.9, 0.5), 1.0)
        events += [*_scored(2, 2, final, "confirmation"), *_scored(2, 2, low, "confirmation")]
        events += [
            EvaluationEvent(turn=2, version=2, result=final, purpose="final", draws_ms=[0.1, 0.11, 0.12]),
            _best(2, 2, final),
        ]
        best = final
    events.append(
        Finished(
            turn=2,
            reason="max_turns" if confirmed else "stopped",
            best_version=2,
            best_reward=best["reward"],
            speedup_vs_eager=best["speedup_vs_eager"],
            speedup_vs_compile=best["speedup_vs_compile"],
        )
    )
    return {"schema": SCHEMA_VERSION, "events": [e.to_dict() for e in events]}
