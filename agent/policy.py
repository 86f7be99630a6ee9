"""The one interface every policy implements: the OpenAI-compatible model and the built-in one.

A policy sees the task, the tool specs and what its last tool calls returned, and answers with
an Action: an optional message and the tool calls to run next. The loop (agent.loop) runs the
tools, records every event, enforces budgets and keeps the best candidate; policies never touch
the workspace or the sandbox directly, so a built-in run and a model run produce trajectories
of the same shape.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from agent.events import Event

# The model an OpenAI-compatible policy asks for when neither the caller nor OPENAI_MODEL names one
# (the CLI's and the web app's default: webapp.settings.KERNELWRIGHT_MODEL).
DEFAULT_MODEL = "gpt-4o-mini"

# The tools a policy may call; agent.tools holds their JSON schemas and implementations.
TOOL_NAMES = (
    "list_files",  # {} -> the workspace's files and sizes
    "read_file",  # {"path"} -> text
    "write_file",  # {"path", "content"} -> diff summary
    "edit_file",  # {"path", "old", "new"} -> search/replace once, diff summary
    "compile",  # {} -> compile log (errors with file and line)
    "evaluate",  # {} -> correctness per trial, timing vs eager and torch.compile, reward
    "profile",  # {} -> per-kernel table and speed-of-light fraction
    "finish",  # {"summary"} -> ends the run; the best verified candidate is the result
)


@dataclass
class TaskInfo:
    name: str
    source: str  # the KernelBench-format reference module
    backend: str  # "cpu" or "cuda"
    options: dict[str, Any] = field(default_factory=dict)  # sandbox options (torch_ops, preset, ...)
    task_hash: str = ""


@dataclass
class ToolInvocation:
    name: str
    arguments: dict[str, Any]
    call_id: str


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class Action:
    message: str = ""
    reasoning: str = ""
    tool_calls: list[ToolInvocation] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


@dataclass
class Observation:
    """What one tool call returned: `content` is the text the model sees (possibly trimmed),
    `data` the structured result (an EvalResult dict for evaluate, and so on)."""

    call_id: str
    name: str
    content: str
    ok: bool = True
    data: dict[str, Any] | None = None


class Policy(ABC):
    name: str = "policy"

    @abstractmethod
    def reset(self, task: TaskInfo, tool_specs: list[dict[str, Any]], history: list[Event]) -> None:
        """Start a run, or resume one: `history` holds the trajectory's events so far
        (empty for a new run), from which the policy rebuilds its state."""

    @abstractmethod
    def next_action(self, observations: list[Observation]) -> Action:
        """Given what the previous action's tool calls returned (empty on the first turn),
        return the next action. An action with no tool calls ends the run."""
