"""What the model reads about speed each turn (agent.tools.format_evaluation): the sandbox's
paired verdict with each interval, "no measurable difference" for an interval holding 1.0, the
milestone judged on a noisy window's worst pairing, and bare ratios marked as such."""

from __future__ import annotations

import re

from agent.tools import format_evaluation
from sandbox.options import EvalOptions
from sandbox.protocol import judge_speed
from sandbox.schema import EvalResult, Round, Status, Verdict


def result(eager_ratio: float, compile_ratio: float, noisy: bool = False) -> EvalResult:
    rounds = [
        Round(
            order=["eager", "compile", "candidate"],
            eager_ms=1.0 * (1 + 0.01 * (i % 3)),
            compile_ms=compile_ratio / eager_ratio * (1 + 0.01 * (i % 2)),
            candidate_ms=1.0 / eager_ratio,
        )
        for i in range(10)
    ]
    if noisy:
        rounds[3].eager_ms *= 1.5
    speed, reward = judge_speed(rounds, ["eager", "compile", "candidate"], EvalOptions(backend="cpu"))
    return EvalResult(
        status=Status.OK,
        verdict=Verdict.PASS,
        speed=speed,
        reward=reward,
        speedup_vs_eager=speed.vs_eager.ratio,
        speedup_vs_compile=speed.vs_compile.ratio,
    )


def speed_lines(res: EvalResult) -> list[str]:
    from sandbox.schema import Stats

    res.timing.candidate = res.timing.eager = Stats(1, 1, 1, 1, 0, 0, 10)
    return [line for line in format_evaluation(res).splitlines() if line.startswith(("speedup", "  speed"))]


def test_the_model_reads_each_speedup_with_its_interval():
    lines = speed_lines(result(1.5, 1.2))
    assert re.match(r"speedup: 1\.5\dx faster than eager \(95% interval 1\.\d+-1\.\d+x\)", lines[0]), lines
    assert "faster than torch.compile (95% interval" in lines[0] and "(10 paired rounds)" in lines[0]


def test_an_interval_holding_one_is_no_measurable_difference_for_the_model_too():
    res = result(1.0, 1.0)
    assert res.speed.vs_eager.ci_low <= 1.0 <= res.speed.vs_eager.ci_high
    text = "\n".join(speed_lines(res))
    assert "no measurable difference from eager" in text and "faster" not in text


def test_a_noisy_window_tells_the_model_what_the_milestone_was_judged_on():
    res = result(1.5, 1.2, noisy=True)  # one eager round 50% slow; the candidate 1.5x in every round
    lines = speed_lines(res)
    assert res.reward == 3 and "noisy machine" in lines[0]
    assert any("reward 3 on the window's fastest baseline round" in line for line in lines[1:])
    small = result(1.03, 1.03, noisy=True)  # 1.03x: below the margin in the worst pairing too
    assert small.reward == 1 and any(
        "reward 1 on the window's fastest baseline round" in line for line in speed_lines(small)
    )


def test_a_result_without_intervals_says_so():
    res = EvalResult(status=Status.OK, verdict=Verdict.PASS, reward=1, speedup_vs_eager=1.3, speedup_vs_compile=0.9)
    assert speed_lines(res) == ["speedup: 1.300x vs eager, 0.900x vs torch.compile (no interval recorded)"]
