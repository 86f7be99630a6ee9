"""A policy that replays a scripted-server script in-process, without HTTP or the openai package.

For hosts without the `openai` client (the GPU host has only torch, numpy and pytest): the same
scenario scripts the scripted server serves become Actions directly. Runs through the real loop,
tools and sandbox; only the model is scripted, exactly as with the server.
"""

from __future__ import annotations

from typing import Any

from agent.events import Event
from agent.policy import Action, Observation, Policy, TaskInfo, ToolInvocation, Usage


class ScriptPolicy(Policy):
    name = "script"

    def __init__(self, script: dict[str, Any]) -> None:
        self.replies = [r for r in script.get("replies", []) if "status" not in r]
        self.index = 0
        self.seen: list[list[Observation]] = []

    def describe(self) -> str:
        return "script"

    def reset(self, task: TaskInfo, tool_specs: list[dict[str, Any]], history: list[Event]) -> None:
        self.index = sum(1 for e in history if e.type == "model_message")

    def next_action(self, observations: list[Observation]) -> Action:
        self.seen.append(observations)
        if self.index >= len(self.replies):
            return Action(tool_calls=[ToolInvocation("finish", {"summary": "script exhausted"}, f"s{self.index}")])
        step = self.replies[self.index]
        self.index += 1
        calls = [
            ToolInvocation(c["name"], dict(c.get("arguments", {})), f"s{self.index}_{i}")
            for i, c in enumerate(step.get("tool_calls") or [])
        ]
        return Action(
            message=step.get("content", ""), reasoning=step.get("reasoning", ""), tool_calls=calls, usage=Usage()
        )
