"""A speed result as every consumer shows it: the header, the job list, the gallery, the API,
the zip README and the charts all read `Job.result()` (or `SpeedReport.of` for one turn's
evaluation), so they agree on one number and say it the same way.

The words follow the sandbox's verdict (schema kernelwright.eval/2, sandbox.schema.Speedup):
an interval that holds 1.0 reads "no measurable difference", never a win. A result stored before
paired timing (eval/1, the older gallery fixtures) has a ratio but no interval, and says so.
Plain Python: no Django, so the agent's CLI could use it too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sandbox.schema import FASTER, SAME, SLOWER, verdict_of  # the sandbox's rule, one home

LABELS = {"eager": "eager", "compile": "torch.compile"}

NO_INTERVAL = "no interval recorded"


@dataclass(frozen=True)
class SpeedupView:
    """The candidate against one baseline: the ratio and, when recorded, its paired interval."""

    baseline: str  # "eager" | "compile"
    ratio: float
    ci_low: float | None = None
    ci_high: float | None = None
    rounds: int | None = None
    verdict: str = ""  # FASTER, SLOWER, SAME; "" without an interval

    @classmethod
    def of(cls, baseline: str, speedup: Any, ratio: Any) -> SpeedupView | None:
        """From a stored Speedup dict (eval/2), else from a bare ratio (eval/1: no interval)."""
        if isinstance(speedup, dict) and _number(speedup.get("ratio")) is not None:
            low, high = _number(speedup.get("ci_low")), _number(speedup.get("ci_high"))
            if low is not None and high is not None:
                return cls(
                    baseline, float(speedup["ratio"]), low, high, _int(speedup.get("rounds")), verdict_of(low, high)
                )
        value = _number(ratio)
        return None if value is None else cls(baseline, value)

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None

    @property
    def faster(self) -> bool:
        return self.verdict == FASTER

    def text(self) -> str:
        """e.g. "1.42x vs eager (95% interval 1.37-1.48x, 12 paired rounds)"."""
        label = LABELS.get(self.baseline, self.baseline)
        if not self.has_interval:
            return f"{self.ratio:.3g}x vs {label} ({NO_INTERVAL})"
        rounds = f", {self.rounds} paired rounds" if self.rounds else ""
        interval = f"95% interval {self.ci_low:.3g}-{self.ci_high:.3g}x{rounds}"
        if self.verdict == SAME:
            return f"no measurable difference vs {label} ({self.ratio:.3g}x, {interval})"
        if self.verdict == SLOWER:
            return f"{self.ratio:.3g}x vs {label}, slower ({interval})"
        return f"{self.ratio:.3g}x vs {label} ({interval})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text()}


@dataclass(frozen=True)
class SpeedReport:
    """What one evaluation says about speed, against both baselines."""

    vs_eager: SpeedupView | None = None
    vs_compile: SpeedupView | None = None
    noisy: bool = False
    milestone: str = ""  # the sandbox's reason for the reward (what it was judged on, on a noisy machine)

    @classmethod
    def of(
        cls,
        evaluation: dict[str, Any] | None,
        speedup_eager: Any = None,
        speedup_compile: Any = None,
        speed: dict[str, Any] | None = None,
    ) -> SpeedReport:
        """From an EvalResult dict (its `speed`, else its bare speedups) or from `speed` and the
        bare speedups stored next to it (a turn's summary columns)."""
        ev = evaluation if isinstance(evaluation, dict) else {}
        speed = speed if isinstance(speed, dict) else ev.get("speed") if isinstance(ev.get("speed"), dict) else {}
        eager = ev.get("speedup_vs_eager") if ev else speedup_eager
        compiled = ev.get("speedup_vs_compile") if ev else speedup_compile
        return cls(
            SpeedupView.of("eager", speed.get("vs_eager"), eager),
            SpeedupView.of("compile", speed.get("vs_compile"), compiled),
            bool(speed.get("noisy")),
            str(speed.get("milestone") or ""),
        )

    @property
    def measured(self) -> bool:
        return self.vs_eager is not None or self.vs_compile is not None

    @property
    def has_interval(self) -> bool:
        return any(s is not None and s.has_interval for s in (self.vs_eager, self.vs_compile))

    def parts(self) -> list[str]:
        """The speedups in words, then the noise warning when the window was noisy."""
        out = [s.text() for s in (self.vs_eager, self.vs_compile) if s is not None]
        if self.noisy:
            out.append("noisy timing window: reward on its worst pairing of rounds")
        return out

    def text(self) -> str:
        return " · ".join(self.parts())

    def to_dict(self) -> dict[str, Any]:
        return {
            "vs_eager": self.vs_eager.to_dict() if self.vs_eager else None,
            "vs_compile": self.vs_compile.to_dict() if self.vs_compile else None,
            "has_interval": self.has_interval,
            "noisy": self.noisy,
            "milestone": self.milestone,
            "text": self.text(),
        }


@dataclass(frozen=True)
class BestResult:
    """A job's result: its best verified candidate as the stored evaluation measured it.
    `confirmed`: that evaluation is the loop's `final` one (the median of the best's evaluations
    after the last turn); before that, the best so far."""

    version: int
    reward: int | None
    confirmed: bool
    speed: SpeedReport
    schema: str = ""

    def text(self) -> str:
        """e.g. "reward 3 · 1.42x vs eager (95% interval 1.37-1.48x, 12 paired rounds) · ..."."""
        head = f"reward {self.reward}" if self.reward is not None else "not rewarded"
        speed = self.speed.text()
        return head + (f" · {speed}" if speed else " · not timed")

    @property
    def status(self) -> str:
        return "confirmed" if self.confirmed else "not confirmed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "reward": self.reward,
            "confirmed": self.confirmed,
            "schema": self.schema,
            **self.speed.to_dict(),
            "text": self.text(),
        }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
