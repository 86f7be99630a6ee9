"""A policy backed by any OpenAI-compatible chat-completions endpoint.

Works against OpenAI, vLLM, SGLang, Ollama, DeepSeek and the like through the official `openai`
client. The conversation is kept in a neutral form (agent.chat.history) and rendered on each
request, which is what makes three things simple:
- switching to the text protocol (```tool {json}``` blocks) when an endpoint rejects `tools`;
- resuming: the turns are rebuilt from trajectory events;
- context management: older tool outputs are shortened or dropped at render time, while the
  system prompt, the task and the current best candidate's files are always sent.
The class composes the parts of agent.chat (prompts, history, rendering, context fitting, the
HTTP client with its retries, reply parsing); it holds only the run's state and the order.
"""

from __future__ import annotations

import os
from typing import Any

from agent.chat import catalog, prompts, render
from agent.chat.client import ChatClient, ContextOverflow, SwitchToText
from agent.chat.context import ContextWindow
from agent.chat.history import History, Turn
from agent.chat.parse import reply_turn, usage_of
from agent.errors import PolicyError
from agent.events import Event
from agent.policy import DEFAULT_MODEL, Action, Observation, Policy, TaskInfo, Usage

MAX_OVERFLOWS = 4  # context overflows the endpoint reports for one request before the run stops


class OpenAIPolicy(Policy):
    name = "openai"

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        temperature: float | None = 0.2,
        max_tokens: int = 8192,
        *,
        tool_mode: str = "auto",  # "auto" (native, text if the endpoint rejects tools), "native", "text"
        context_window: int | None = None,
        prices: dict[str, tuple[float, float]] | None = None,
        max_retries: int = 6,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 30.0,
        timeout_s: float = 300.0,
        keep_recent_turns: int = 4,
        system_prompt: str | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if tool_mode not in ("auto", "native", "text"):
            raise ValueError("tool_mode must be 'auto', 'native' or 'text'")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.model = model or os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL
        key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"  # local servers accept any key
        self.tool_mode = tool_mode
        self.mode = "text" if tool_mode == "text" else "native"
        self.prices = {**catalog.DEFAULT_PRICES, **(prices or {})}
        self.client = ChatClient(
            self.base_url,
            key,
            self.model,
            max_tokens=max_tokens,
            temperature=temperature,
            max_retries=max_retries,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            timeout_s=timeout_s,
            extra_body=extra_body,
        )
        self.window = ContextWindow(context_window or catalog.context_window(self.model), max_tokens, keep_recent_turns)
        self.history = History()
        self._system_template = system_prompt
        self._prompt_cache: dict[tuple[str, int], str] = {}
        self.task: TaskInfo | None = None
        self.specs: list[dict[str, Any]] = []

    def describe(self) -> str:
        return f"openai:{self.model}@{self.base_url}"

    # -- Policy interface ------------------------------------------------------------------
    def reset(self, task: TaskInfo, tool_specs: list[dict[str, Any]], history: list[Event]) -> None:
        self.task, self.specs = task, tool_specs
        self.window.reset()
        self.history.rebuild(history)

    def next_action(self, observations: list[Observation]) -> Action:
        if self.task is None:
            raise RuntimeError("reset() must be called before next_action()")
        self.history.attach(observations)
        usage = Usage()
        turn = self._ask(usage)
        if not turn.calls:
            turn.nudged = True
            second = self._ask(usage)
            # Merge: the trajectory records one model message per loop turn.
            self.history.turns.pop()
            turn.content = "\n\n".join(x for x in (turn.content, second.content) if x)
            turn.reasoning = "\n\n".join(x for x in (turn.reasoning, second.reasoning) if x)
            turn.calls, turn.raw_args = second.calls, second.raw_args
            turn.nudged = not second.calls
        return Action(message=turn.content, reasoning=turn.reasoning, tool_calls=list(turn.calls), usage=usage)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return catalog.cost(self.prices, self.model, prompt_tokens, completion_tokens)

    # -- one reply ---------------------------------------------------------------------------
    def _ask(self, usage: Usage) -> Turn:
        """One model reply (after retries, mode switches and context compaction) as a new turn."""
        overflow = 0
        while True:
            messages = self._fit_messages()
            try:
                resp = self.client.create(
                    messages,
                    self.specs if self.mode == "native" else None,
                    may_switch=self.mode == "native" and self.tool_mode == "auto",
                )
            except SwitchToText:
                self.mode = "text"
                continue
            except ContextOverflow as exc:
                overflow += 1
                if overflow > MAX_OVERFLOWS or not self.window.compact_more(len(self.history.turns)):
                    raise PolicyError(
                        "context_overflow", f"the conversation does not fit the model's context: {exc}"
                    ) from exc
                continue
            break
        turn = reply_turn(resp, self.mode, len(self.history.turns) + 1)
        pt, ct = usage_of(resp, messages, turn)
        usage.prompt_tokens += pt
        usage.completion_tokens += ct
        usage.cost_usd += self.cost(pt, ct)
        self.history.turns.append(turn)
        return turn

    # -- what is sent ------------------------------------------------------------------------
    def system_prompt(self) -> str:
        assert self.task is not None
        key = (self.mode, id(self.task))
        if key not in self._prompt_cache:
            self._prompt_cache[key] = prompts.system_prompt(self.task, self.mode, self.specs, self._system_template)
        return self._prompt_cache[key]

    def task_message(self) -> str:
        assert self.task is not None
        return prompts.task_message(self.task, self.window.dropped_turns, self.window.compact_level, self.history.best)

    def _render_turn(self, i: int) -> list[dict[str, Any]]:
        kept, level = self.window.visible(i, len(self.history.turns))
        return render.turn_messages(self.history.turns[i], level, self.mode) if kept else []

    def render(self) -> list[dict[str, Any]]:
        """The whole request as it would be sent now (the export renders runs with it too)."""
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt()},
            {"role": "user", "content": self.task_message()},
        ]
        for i in range(len(self.history.turns)):
            msgs += self._render_turn(i)
        return msgs

    def _fit_messages(self) -> list[dict[str, Any]]:
        return self.window.fit(self.render, self._render_turn, len(self.history.turns))

    # -- state read by tests and the agent bench ----------------------------------------------
    @property
    def compact_level(self) -> int:
        return self.window.compact_level

    @property
    def dropped_turns(self) -> int:
        return self.window.dropped_turns

    @property
    def requests(self) -> int:
        return self.client.requests
