"""From trajectory events to stored turns and back.

A Turn row holds the events of one turn verbatim (the `kernelwright.trajectory/1` dicts), plus
a summary computed here once (reward, speedups, tokens, whether it had an error or improved the
best) so that lists, filters and charts read columns instead of walking events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.events import SCHEMA_VERSION

ERROR_STATUSES = {"incorrect", "rejected", "compile_error", "runtime_error", "timeout"}


@dataclass
class TurnSummary:
    reward: int | None = None
    evaluation: dict[str, Any] | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    speed: dict[str, Any] | None = None  # the `speed` of the evaluation the speedups came from (eval/2)
    best_speedup_eager: float | None = None  # the turn's last best_changed, vs eager
    has_error: bool = False
    improved: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    best: dict[str, Any] | None = None  # the turn's last best_changed event
    finished: dict[str, Any] | None = None  # the finished event, when this turn holds it


def summarize(events: list[dict[str, Any]]) -> TurnSummary:
    """The turn's reward is its highest (the later of equals), with the speedups and intervals of
    the evaluation that earned it (a reward event follows its evaluation); in the turn that holds
    the loop's `final` evaluation, that one: it is the run's result."""
    s = TurnSummary()
    last_speed, final = None, None
    for e in events:
        kind = e.get("type")
        if kind == "model_message":
            s.prompt_tokens += int(e.get("prompt_tokens") or 0)
            s.completion_tokens += int(e.get("completion_tokens") or 0)
            s.cost_usd += float(e.get("cost_usd") or 0.0)
        elif kind == "evaluation":
            s.evaluation = e.get("result") or {}
            last_speed = s.evaluation.get("speed")
            if e.get("purpose") == "final":
                final = s.evaluation
            if s.evaluation.get("status") in ERROR_STATUSES:
                s.has_error = True
        elif kind == "compile_result":
            if not (e.get("result") or {}).get("ok", True):
                s.has_error = True
        elif kind == "reward":
            reward = e.get("reward")
            if reward is not None and (s.reward is None or reward >= s.reward):
                s.reward = reward
                s.speedup_eager = e.get("speedup_vs_eager")
                s.speedup_compile = e.get("speedup_vs_compile")
                s.speed = last_speed
        elif kind == "best_changed":
            s.improved = True
            s.best = e
            s.best_speedup_eager = e.get("speedup_vs_eager")
        elif kind == "error" and e.get("kind") != "budget":  # a used-up budget is how runs end, not a fault
            s.has_error = True
        elif kind == "tool_result" and not e.get("ok", True):
            s.has_error = True
        elif kind == "finished":
            s.finished = e
    scored = final or (s.evaluation if s.reward is None else None)
    if scored:
        s.reward = scored.get("reward")
        s.speedup_eager = scored.get("speedup_vs_eager")
        s.speedup_compile = scored.get("speedup_vs_compile")
        s.speed = scored.get("speed")
    return s


def evaluation_behind(events: list[dict[str, Any]], at: int) -> dict[str, Any] | None:
    """The evaluation event that a best_changed or reward event at `at` came from: the last
    evaluation of its version before it (a later evaluation of that version did not make it)."""
    version = events[at].get("version")
    return next(
        (e for e in reversed(events[:at]) if e.get("type") == "evaluation" and e.get("version") == version), None
    )


def evaluations_behind(events: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """evaluation_behind of every best_changed event (None for the other events), in one pass: a
    turn may hold many of them (an imported one), and a scan back from each would be quadratic."""
    last: dict[Any, dict[str, Any]] = {}
    out: list[dict[str, Any] | None] = []
    for e in events:
        version = e.get("version")
        key = json.dumps(version, sort_keys=True) if isinstance(version, dict | list) else version
        out.append(last.get(key) if e.get("type") == "best_changed" else None)
        if e.get("type") == "evaluation":
            last[key] = e
    return out


def group_by_turn(events: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(int(e.get("turn") or 0), []).append(e)
    return dict(sorted(out.items()))


def trajectory_dict(turn_events: Iterable[list[dict[str, Any]]]) -> dict[str, Any]:
    """The exported file: the same `{"schema", "events"}` shape agent.trajectory writes."""
    return {"schema": SCHEMA_VERSION, "events": [e for events in turn_events for e in events]}
