"""Trajectory events: the one versioned shape of everything an agent run did.

The CLI writes them to a JSON file, the web app stores them per turn and streams "turn N
ready" notifications for them, the viewer renders them, exports and imports carry them.
Each event is a dataclass with a `type` tag; `event_from_dict` is the only parser.

Bump SCHEMA_VERSION when a field changes meaning or is removed.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

SCHEMA_VERSION = "kernelwright.trajectory/1"


@dataclass(kw_only=True)
class Event:
    type: ClassVar[str] = "event"
    turn: int = 0  # 0 for events before the first turn (task)
    ts: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self)}


@dataclass(kw_only=True)
class TaskEvent(Event):
    type: ClassVar[str] = "task"
    name: str
    source: str  # the reference module, verbatim
    task_hash: str = ""
    backend: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    policy: str = ""  # e.g. "builtin" or "openai:gpt-4o@https://..."


@dataclass(kw_only=True)
class TurnStarted(Event):
    type: ClassVar[str] = "turn_started"


@dataclass(kw_only=True)
class ModelMessage(Event):
    type: ClassVar[str] = "model_message"
    content: str = ""
    reasoning: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(kw_only=True)
class ToolCall(Event):
    type: ClassVar[str] = "tool_call"
    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class ToolResult(Event):
    type: ClassVar[str] = "tool_result"
    call_id: str
    name: str
    content: str  # full text; what the model saw may be a trimmed version of this
    trimmed_chars: int = 0  # how much of `content` was cut before showing it to the model
    ok: bool = True


@dataclass(kw_only=True)
class FileEdit(Event):
    type: ClassVar[str] = "file_edit"
    path: str
    diff: str  # unified diff, old -> new
    content: str  # the file after the edit
    version: int  # workspace version after this edit


@dataclass(kw_only=True)
class CompileEvent(Event):
    type: ClassVar[str] = "compile_result"
    version: int
    result: dict[str, Any]  # sandbox.schema.CompileResult as a dict


@dataclass(kw_only=True)
class EvaluationEvent(Event):
    type: ClassVar[str] = "evaluation"
    version: int
    result: dict[str, Any]  # sandbox.schema.EvalResult.to_dict()
    # "": the policy's evaluation; "confirmation": the loop evaluating the best candidate again
    # after the last turn; "final": the one of the best's evaluations reported as the result (the
    # median candidate time), repeated from the evaluation it came from (agent.loop._Run.confirm)
    purpose: str = ""
    draws_ms: list[float] = field(default_factory=list)  # final: the candidate medians of every evaluation of it


@dataclass(kw_only=True)
class ProfileEvent(Event):
    type: ClassVar[str] = "profile"
    version: int
    rows: list[dict[str, Any]] = field(default_factory=list)  # sandbox.schema.ProfileRow dicts
    roofline: dict[str, Any] | None = None
    text: str = ""


# The speedups of reward, best_changed and finished events are the paired window's median ratios
# (schema kernelwright.eval/2); `speed` carries their intervals: the evaluation's
# sandbox.schema.Speed as a dict (vs_eager / vs_compile with ratio, ci_low, ci_high, rounds and
# verdict, the noise check, the verdict and the milestone in words). None: not recorded (an older
# trajectory, or no timing).


@dataclass(kw_only=True)
class RewardEvent(Event):
    type: ClassVar[str] = "reward"
    version: int
    reward: int
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speed: dict[str, Any] | None = None


@dataclass(kw_only=True)
class BestChanged(Event):
    type: ClassVar[str] = "best_changed"
    version: int
    reward: int
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    files: dict[str, str] = field(default_factory=dict)
    speed: dict[str, Any] | None = None
    confirmed: bool = False  # made from the `final` evaluation after the last turn: the run's result


@dataclass(kw_only=True)
class ErrorEvent(Event):
    type: ClassVar[str] = "error"
    kind: str  # "model", "tool", "budget", "internal", "confirmation" (the best failed a re-evaluation)
    message: str


@dataclass(kw_only=True)
class Finished(Event):
    type: ClassVar[str] = "finished"
    reason: str  # "model_finished", "max_turns", "max_tokens", "max_wall_time", "max_cost", "stopped", "error"
    best_version: int | None = None
    best_reward: int | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speed: dict[str, Any] | None = None
    confirmed: bool = False  # the best is the confirmed result (its final evaluation), not only the best so far
    summary: str = ""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        TaskEvent,
        TurnStarted,
        ModelMessage,
        ToolCall,
        ToolResult,
        FileEdit,
        CompileEvent,
        EvaluationEvent,
        ProfileEvent,
        RewardEvent,
        BestChanged,
        ErrorEvent,
        Finished,
    )
}


def event_from_dict(data: dict[str, Any]) -> Event:
    d = dict(data)
    kind = d.pop("type", None)
    cls = EVENT_TYPES.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown trajectory event type {kind!r}")
    return cls(**d)
