"""The conversation in a neutral form, rendered anew for each request (agent.chat.render): turns
of assistant text, tool calls and what the model saw of their results, plus the current best
candidate. Kept neutral so that the tool protocol can change mid-run and a resumed run rebuilds
it from trajectory events."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.events import BestChanged, Event, ModelMessage, ToolCall, ToolResult, TurnStarted
from agent.policy import Observation, ToolInvocation
from agent.tools import INVALID_ARGUMENTS_KEY, limit_for, trim_for_model


@dataclass
class Turn:
    content: str = ""
    reasoning: str = ""
    calls: list[ToolInvocation] = field(default_factory=list)
    raw_args: dict[str, str] = field(default_factory=dict)  # call_id -> arguments as the model sent them
    results: dict[str, str] = field(default_factory=dict)  # call_id -> what the model saw
    nudged: bool = False  # the model answered without a tool call and was asked again


class History:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.best: dict[str, Any] | None = None

    def _owner(self, call_id: str) -> Turn | None:
        return next((t for t in reversed(self.turns) if any(c.call_id == call_id for c in t.calls)), None)

    def rebuild(self, events: list[Event]) -> None:
        """The conversation of a resumed run, from its trajectory's events."""
        self.turns, self.best = [], None
        current: Turn | None = None
        for e in events:
            if isinstance(e, TurnStarted):
                current = Turn()
                self.turns.append(current)
            elif isinstance(e, ModelMessage) and current is not None:
                current.content, current.reasoning = e.content, e.reasoning
            elif isinstance(e, ToolCall) and current is not None:
                args = e.arguments
                raw = args.get(INVALID_ARGUMENTS_KEY) if isinstance(args, dict) else None
                current.calls.append(ToolInvocation(e.name, args, e.call_id))
                current.raw_args[e.call_id] = raw if isinstance(raw, str) else json.dumps(args)
            elif isinstance(e, ToolResult):
                owner = self._owner(e.call_id)
                if owner is not None:
                    owner.results[e.call_id] = trim_for_model(e.content, limit_for(e.name))[0]
            elif isinstance(e, BestChanged):
                self.best = {
                    "version": e.version,
                    "reward": e.reward,
                    "speedup_vs_eager": e.speedup_vs_eager,
                    "files": dict(e.files),
                }

    def attach(self, observations: list[Observation]) -> None:
        """The tools' answers to the last turn's calls (and a new best, when one came)."""
        for ob in observations:
            owner = self._owner(ob.call_id)
            if owner is not None:
                owner.results[ob.call_id] = ob.content
            if ob.data and ob.data.get("best"):
                self.best = ob.data["best"]
