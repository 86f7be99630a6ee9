"""From trajectory events to stored turns and back.

A Turn row holds the events of one turn verbatim (the `kernelwright.trajectory/1` dicts), plus
a summary computed here once (reward, speedups, tokens, whether it had an error or improved the
best) so that lists, filters and charts read columns instead of walking events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.events import SCHEMA_VERSION, event_from_dict

ERROR_STATUSES = {"incorrect", "rejected", "compile_error", "runtime_error", "timeout"}


@dataclass
class TurnSummary:
    reward: int | None = None
    evaluation: dict[str, Any] | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    has_error: bool = False
    improved: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    best: dict[str, Any] | None = None  # the turn's last best_changed event
    finished: dict[str, Any] | None = None  # the finished event, when this turn holds it


def summarize(events: list[dict[str, Any]]) -> TurnSummary:
    s = TurnSummary()
    for e in events:
        kind = e.get("type")
        if kind == "model_message":
            s.prompt_tokens += int(e.get("prompt_tokens") or 0)
            s.completion_tokens += int(e.get("completion_tokens") or 0)
            s.cost_usd += float(e.get("cost_usd") or 0.0)
        elif kind == "evaluation":
            s.evaluation = e.get("result") or {}
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
        elif kind == "best_changed":
            s.improved = True
            s.best = e
        elif kind == "error" and e.get("kind") != "budget":  # a used-up budget is how runs end, not a fault
            s.has_error = True
        elif kind == "tool_result" and not e.get("ok", True):
            s.has_error = True
        elif kind == "finished":
            s.finished = e
    if s.reward is None and s.evaluation:
        s.reward = s.evaluation.get("reward")
        s.speedup_eager = s.evaluation.get("speedup_vs_eager")
        s.speedup_compile = s.evaluation.get("speedup_vs_compile")
    return s


def group_by_turn(events: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(int(e.get("turn") or 0), []).append(e)
    return dict(sorted(out.items()))


def validate_events(events: list[Any]) -> list[dict[str, Any]]:
    """Parse every event with the agent's parser (rejecting unknown shapes) and return the dicts."""
    return [event_from_dict(e).to_dict() for e in events]


def trajectory_dict(turn_events: Iterable[list[dict[str, Any]]]) -> dict[str, Any]:
    """The exported file: the same `{"schema", "events"}` shape agent.trajectory writes."""
    return {"schema": SCHEMA_VERSION, "events": [e for events in turn_events for e in events]}
