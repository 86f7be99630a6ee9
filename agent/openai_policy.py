"""A policy backed by any OpenAI-compatible chat-completions endpoint.

Works against OpenAI, vLLM, SGLang, Ollama, DeepSeek and the like through the official `openai`
client. The conversation is kept in a neutral form (turns of assistant text, tool calls and
their results) and rendered on each request, which is what makes three things simple:
- switching to the text protocol (```tool {json}``` blocks) when an endpoint rejects `tools`;
- resuming: the turns are rebuilt from trajectory events;
- context management: older tool outputs are shortened or dropped at render time, while the
  system prompt, the task and the current best candidate's files are always sent.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import PolicyError
from agent.events import BestChanged, Event, ModelMessage, ToolCall, ToolResult, TurnStarted
from agent.policy import DEFAULT_MODEL, Action, Observation, Policy, TaskInfo, ToolInvocation, Usage
from agent.tools import ARGUMENTS_ERROR_KEY, INVALID_ARGUMENTS_KEY, limit_for, source_for_model, trim_for_model

PROMPTS = Path(__file__).parent / "prompts"

# USD per million tokens (input, output). Defaults from the providers' public price pages at
# the time of writing; pass `prices=` to override. Unknown models cost 0 (reported as such).
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "deepseek-chat": (0.27, 1.10),
    "deepseek-reasoner": (0.55, 2.19),
}
# Context windows in tokens by model-name prefix; unknown models get DEFAULT_CONTEXT.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_000_000,
    "gpt-5": 400_000,
    "o3": 200_000,
    "o4": 200_000,
    "deepseek": 64_000,
    "qwen": 32_768,
    "llama": 128_000,
}
DEFAULT_CONTEXT = 32_768
CHARS_PER_TOKEN = 3.5  # conservative for code-heavy text: estimates err on the large side

NUDGE = "You did not call a tool. Continue by calling one of the tools, or call finish if you are done."


def _prefix_lookup(table: dict[str, Any], model: str) -> Any:
    name = model.lower().split("/")[-1]
    best = max((k for k in table if name.startswith(k)), key=len, default=None)
    return table[best] if best is not None else None


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


@dataclass
class _Turn:
    content: str = ""
    reasoning: str = ""
    calls: list[ToolInvocation] = field(default_factory=list)
    raw_args: dict[str, str] = field(default_factory=dict)  # call_id -> arguments as the model sent them
    results: dict[str, str] = field(default_factory=dict)  # call_id -> what the model saw
    nudged: bool = False


class _SwitchToText(Exception):
    pass


class _ContextOverflow(Exception):
    pass


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
        import openai

        if tool_mode not in ("auto", "native", "text"):
            raise ValueError("tool_mode must be 'auto', 'native' or 'text'")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.model = model or os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL
        key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"  # local servers accept any key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tool_mode = tool_mode
        self.mode = "text" if tool_mode == "text" else "native"
        self.context_window = context_window or _prefix_lookup(CONTEXT_WINDOWS, self.model) or DEFAULT_CONTEXT
        self.prices = {**DEFAULT_PRICES, **(prices or {})}
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.keep_recent_turns = keep_recent_turns
        self.timeout_s = timeout_s
        self.extra_body = extra_body
        self._system_template = system_prompt
        self._max_tokens_param = "max_tokens"
        self.client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=timeout_s, max_retries=0)
        self.task: TaskInfo | None = None
        self.specs: list[dict[str, Any]] = []
        self.turns: list[_Turn] = []
        self.best: dict[str, Any] | None = None
        self.compact_level = 0  # raised when the conversation nears the context window
        self.dropped_turns = 0
        self.requests = 0
        self._prompt_cache: dict[tuple[str, int], str] = {}

    def describe(self) -> str:
        return f"openai:{self.model}@{self.base_url}"

    # -- Policy interface ------------------------------------------------------------------
    def reset(self, task: TaskInfo, tool_specs: list[dict[str, Any]], history: list[Event]) -> None:
        self.task = task
        self.specs = tool_specs
        self.turns = []
        self.best = None
        self.compact_level = 0
        self.dropped_turns = 0
        current: _Turn | None = None
        names: dict[str, str] = {}
        for e in history:
            if isinstance(e, TurnStarted):
                current = _Turn()
                self.turns.append(current)
            elif isinstance(e, ModelMessage) and current is not None:
                current.content, current.reasoning = e.content, e.reasoning
            elif isinstance(e, ToolCall) and current is not None:
                args = e.arguments
                raw = args.get(INVALID_ARGUMENTS_KEY) if isinstance(args, dict) else None
                current.calls.append(ToolInvocation(e.name, args, e.call_id))
                current.raw_args[e.call_id] = raw if isinstance(raw, str) else json.dumps(args)
                names[e.call_id] = e.name
            elif isinstance(e, ToolResult):
                owner = next((t for t in reversed(self.turns) if any(c.call_id == e.call_id for c in t.calls)), None)
                if owner is not None:
                    owner.results[e.call_id] = trim_for_model(e.content, limit_for(e.name))[0]
            elif isinstance(e, BestChanged):
                self.best = {"version": e.version, "reward": e.reward, "speedup_vs_eager": e.speedup_vs_eager,
                             "files": dict(e.files)}

    def next_action(self, observations: list[Observation]) -> Action:
        if self.task is None:
            raise RuntimeError("reset() must be called before next_action()")
        self._attach(observations)
        usage = Usage()
        turn = self._ask(usage)
        if not turn.calls:
            turn.nudged = True
            second = self._ask(usage)
            # Merge: the trajectory records one model message per loop turn.
            self.turns.pop()
            turn.content = "\n\n".join(x for x in (turn.content, second.content) if x)
            turn.reasoning = "\n\n".join(x for x in (turn.reasoning, second.reasoning) if x)
            turn.calls, turn.raw_args = second.calls, second.raw_args
            turn.nudged = not second.calls
        return Action(message=turn.content, reasoning=turn.reasoning, tool_calls=list(turn.calls), usage=usage)

    # -- conversation ----------------------------------------------------------------------
    def _attach(self, observations: list[Observation]) -> None:
        for ob in observations:
            owner = next((t for t in reversed(self.turns) if any(c.call_id == ob.call_id for c in t.calls)), None)
            if owner is not None:
                owner.results[ob.call_id] = ob.content
            if ob.data and ob.data.get("best"):
                self.best = ob.data["best"]

    def _ask(self, usage: Usage) -> _Turn:
        """One model reply (after retries, mode switches and context compaction) as a new turn."""
        overflow = 0
        while True:
            messages = self._fit_messages()
            try:
                resp = self._create(messages)
            except _SwitchToText:
                self.mode = "text"
                continue
            except _ContextOverflow as exc:
                overflow += 1
                if overflow > 4 or not self._compact_more():
                    raise PolicyError("context_overflow", f"the conversation does not fit the model's context: {exc}") from exc
                continue
            break
        turn = self._parse(resp)
        pt, ct = _usage_of(resp, messages, turn)
        usage.prompt_tokens += pt
        usage.completion_tokens += ct
        usage.cost_usd += self.cost(pt, ct)
        self.turns.append(turn)
        return turn

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        price = _prefix_lookup(self.prices, self.model)
        if price is None:
            return 0.0
        return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1e6

    # -- rendering -------------------------------------------------------------------------
    def system_prompt(self) -> str:
        key = (self.mode, id(self.task))
        if key not in self._prompt_cache:
            self._prompt_cache[key] = self._build_system_prompt()
        return self._prompt_cache[key]

    def _build_system_prompt(self) -> str:
        assert self.task is not None
        text = self._system_template or (PROMPTS / "system.md").read_text(encoding="utf-8")
        backend = self.task.backend
        rules = (PROMPTS / f"backend_{'cuda' if backend == 'cuda' else 'cpu'}.md").read_text(encoding="utf-8")
        torch_ops = str(self.task.options.get("torch_ops", "forbid"))
        text = text.replace("{{backend}}", backend).replace("{{backend_rules}}", rules).replace("{{torch_ops}}", torch_ops)
        if self.mode == "text":
            text += "\n\n" + self._text_protocol()
        return text

    def _text_protocol(self) -> str:
        proto = (PROMPTS / "text_protocol.md").read_text(encoding="utf-8")
        lines = []
        for spec in self.specs:
            f = spec["function"]
            props = f["parameters"].get("properties", {})
            args = ", ".join(f'"{k}": <{v.get("type", "string")}>' for k, v in props.items())
            lines.append(f"- {f['name']} {{{args}}}: {f['description']}")
        return proto.replace("{{tools}}", "\n".join(lines))

    def task_message(self) -> str:
        assert self.task is not None
        t = self.task
        opts = ", ".join(f"{k}={v}" for k, v in sorted(t.options.items())) or "defaults"
        parts = [
            f"Task: {t.name} (backend: {t.backend}; sandbox options: {opts})",
            "The reference module (also readable as reference.py, which you cannot change):",
            f"```python\n{source_for_model(t.source).rstrip()}\n```",
            "Write model_new.py with class ModelNew and your kernels, evaluate, then improve. "
            "Start now by calling a tool.",
        ]
        if self.dropped_turns or self.compact_level:
            if self.dropped_turns:
                parts.append(
                    f"[Context note: {self.dropped_turns} earlier turn(s) were removed to fit the context window. "
                    "Their file edits are still in the workspace: list_files/read_file show the current state.]"
                )
            if self.best:
                b = self.best
                files = "\n".join(f"--- {p} ---\n{c}" for p, c in sorted(b.get("files", {}).items()))
                parts.append(
                    f"Current best verified candidate (workspace version {b.get('version')}, reward {b.get('reward')}, "
                    f"speedup vs eager {b.get('speedup_vs_eager')}):\n{files}"
                )
        return "\n\n".join(parts)

    def _turn_visible(self, index: int) -> tuple[bool, int]:
        """(kept, compaction level) of turn `index` under the current compaction state."""
        recent = len(self.turns) - index <= self.keep_recent_turns
        if index < self.dropped_turns:
            return False, 2
        return True, 0 if recent else min(self.compact_level, 2)

    def _shorten(self, text: str, level: int, what: str) -> str:
        keep = {0: None, 1: 600, 2: 200}[level]
        if keep is None or len(text) <= keep:
            return text
        return text[: keep // 2] + f"\n[... older {what} shortened to fit the context: {len(text) - keep // 2} chars dropped ...]"

    def _args_for(self, turn: _Turn, call: ToolInvocation, level: int) -> str:
        raw = turn.raw_args.get(call.call_id) or json.dumps(call.arguments)
        if level == 0 or len(raw) <= 600 or not isinstance(call.arguments, dict):
            return raw
        args = {
            k: (v if not isinstance(v, str) or len(v) <= 300 else f"[{len(v)} chars elided to fit the context]")
            for k, v in call.arguments.items()
        }
        return json.dumps(args)

    def _render_turn(self, i: int) -> list[dict[str, Any]]:
        kept, level = self._turn_visible(i)
        if not kept:
            return []
        turn = self.turns[i]
        if not turn.content and not turn.calls:
            return []  # a turn interrupted before the model answered (resume), or an empty reply
        msgs = self._render_native(turn, level) if self.mode == "native" else self._render_text(turn, level)
        if turn.nudged:
            msgs.append({"role": "user", "content": NUDGE})
        return msgs

    def render(self) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt()},
            {"role": "user", "content": self.task_message()},
        ]
        for i in range(len(self.turns)):
            msgs += self._render_turn(i)
        return msgs

    def _render_native(self, turn: _Turn, level: int) -> list[dict[str, Any]]:
        msg: dict[str, Any] = {"role": "assistant", "content": self._shorten(turn.content, level, "message") or None}
        if turn.calls:
            msg["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": self._args_for(turn, c, level)}}
                for c in turn.calls
            ]
        elif msg["content"] is None:
            msg["content"] = ""
        out = [msg]
        for c in turn.calls:
            text = turn.results.get(c.call_id, "(no result: the run was interrupted before this tool ran)")
            out.append({"role": "tool", "tool_call_id": c.call_id, "content": self._shorten(text, level, "tool output")})
        return out

    def _render_text(self, turn: _Turn, level: int) -> list[dict[str, Any]]:
        blocks = []
        for c in turn.calls:
            args = self._args_for(turn, c, level)
            try:
                body = json.dumps({"name": c.name, "arguments": json.loads(args)})
            except json.JSONDecodeError:
                body = '{"name": ' + json.dumps(c.name) + ', "arguments": ' + args + "}"
            blocks.append(f"```tool\n{body}\n```")
        content = "\n\n".join(x for x in [self._shorten(turn.content, level, "message")] + blocks if x)
        out = [{"role": "assistant", "content": content or "(no reply)"}]
        if turn.calls:
            parts = []
            for c in turn.calls:
                text = turn.results.get(c.call_id, "(no result: the run was interrupted before this tool ran)")
                parts.append(f"### result of {c.name} (call {c.call_id})\n{self._shorten(text, level, 'tool output')}")
            out.append({"role": "user", "content": "Tool results:\n\n" + "\n\n".join(parts)})
        return out

    # -- context management ----------------------------------------------------------------
    def _budget_tokens(self) -> int:
        return max(2048, self.context_window - self.max_tokens - 512)

    def _fit_messages(self) -> list[dict[str, Any]]:
        """Render, compacting older turns until the estimate fits (or nothing more can go).
        Shortening is tried first (two levels); then the oldest turns are dropped, the number
        computed in one pass from per-turn estimates so long runs stay cheap to prepare."""
        limit = self._budget_tokens() * 0.9
        while True:
            msgs = self.render()
            if estimate_messages(msgs) <= limit:
                return msgs
            if self.compact_level < 2:
                self.compact_level += 1
                continue
            break
        if self.dropped_turns == 0 and len(self.turns) > 2:
            self.dropped_turns = 1  # so the head below includes the context note and the pinned best
        head = estimate_messages(self.render()[:2])
        sizes = [estimate_messages(self._render_turn(i)) for i in range(len(self.turns))]
        total = head + sum(sizes[self.dropped_turns :])
        while total > limit and self.dropped_turns < len(self.turns) - 2:
            total -= sizes[self.dropped_turns]
            self.dropped_turns += 1
        return self.render()

    def _compact_more(self) -> bool:
        """One more step after the server said the context overflowed: shorten, then drop a
        quarter of the remaining older turns. The last two turns always stay."""
        if self.compact_level < 2:
            self.compact_level += 1
            return True
        room = len(self.turns) - 2 - self.dropped_turns
        if room > 0:
            self.dropped_turns += max(1, room // 4)
            return True
        return False

    # -- the API call ----------------------------------------------------------------------
    def _create(self, messages: list[dict[str, Any]]) -> Any:
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, self._max_tokens_param: self.max_tokens}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.mode == "native":
            kwargs["tools"] = self.specs
            kwargs["tool_choice"] = "auto"
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            self.requests += 1
            try:
                return self.client.chat.completions.create(**kwargs)
            except openai.AuthenticationError as exc:
                raise PolicyError(
                    "auth",
                    f"the model endpoint {self.base_url} rejected the API key (HTTP 401): {_msg(exc)}. "
                    "Check --api-key / OPENAI_API_KEY.",
                ) from exc
            except openai.PermissionDeniedError as exc:
                raise PolicyError("auth", f"the API key may not use model {self.model!r} (HTTP 403): {_msg(exc)}") from exc
            except openai.NotFoundError as exc:
                raise PolicyError(
                    "model_not_found",
                    f"model {self.model!r} was not found at {self.base_url} (HTTP 404: {_msg(exc)}). "
                    f"{self._available_models()}Also check that the base URL ends with /v1.",
                ) from exc
            except openai.BadRequestError as exc:
                text = _msg(exc).lower()
                if "context" in text and ("length" in text or "window" in text or "maximum" in text) or "too many tokens" in text:
                    raise _ContextOverflow(_msg(exc)) from exc
                if self.mode == "native" and self.tool_mode == "auto" and _rejects_tools(text):
                    raise _SwitchToText() from exc
                if "max_completion_tokens" in text and self._max_tokens_param == "max_tokens":
                    self._max_tokens_param = "max_completion_tokens"
                    kwargs["max_completion_tokens"] = kwargs.pop("max_tokens")
                    continue
                if "temperature" in text and "temperature" in kwargs:
                    kwargs.pop("temperature")
                    self.temperature = None
                    continue
                raise PolicyError("bad_request", f"the model endpoint refused the request (HTTP 400): {_msg(exc)}") from exc
            except (openai.RateLimitError, openai.APIConnectionError, openai.InternalServerError) as exc:
                last = exc
            except openai.APIStatusError as exc:
                if exc.status_code == 422 and self.mode == "native" and self.tool_mode == "auto" and _rejects_tools(
                    _msg(exc).lower()
                ):
                    raise _SwitchToText() from exc
                if exc.status_code in (408, 409) or exc.status_code >= 500:
                    last = exc
                else:
                    raise PolicyError("bad_request", f"the model endpoint answered HTTP {exc.status_code}: {_msg(exc)}") from exc
            if attempt < self.max_retries:
                time.sleep(self._delay(attempt, last))
        assert last is not None
        tries = self.max_retries + 1
        if isinstance(last, openai.RateLimitError):
            raise PolicyError("rate_limited", f"still rate-limited (HTTP 429) after {tries} attempts: {_msg(last)}") from last
        if isinstance(last, openai.APITimeoutError):
            raise PolicyError(
                "unreachable", f"the model endpoint {self.base_url} timed out on {tries} attempts (timeout {self.timeout_s:g} s)"
            ) from last
        if isinstance(last, openai.APIConnectionError):
            raise PolicyError(
                "unreachable", f"cannot reach the model endpoint {self.base_url} after {tries} attempts: {_msg(last)}"
            ) from last
        raise PolicyError("server_error", f"the model endpoint kept failing after {tries} attempts: {_msg(last)}") from last

    def _delay(self, attempt: int, exc: Exception | None) -> float:
        """Exponential backoff with jitter; a server's Retry-After wins when it is shorter than the cap."""
        delay = min(self.backoff_max_s, self.backoff_base_s * (2**attempt)) * (0.5 + random.random() / 2)
        response = getattr(exc, "response", None)
        header = response.headers.get("retry-after") if response is not None else None
        if header:
            try:
                delay = min(self.backoff_max_s, max(0.0, float(header)))
            except ValueError:
                pass
        return delay

    def _available_models(self) -> str:
        try:
            ids = [m.id for m in self.client.models.list()][:20]
        except Exception:
            return ""
        return f"The endpoint serves: {', '.join(ids)}. " if ids else ""

    # -- parsing ---------------------------------------------------------------------------
    def _parse(self, resp: Any) -> _Turn:
        choices = getattr(resp, "choices", None) or []
        if not choices:
            return _Turn(content="(the endpoint returned no choices)")
        msg = choices[0].message
        content = msg.content or ""
        reasoning = _reasoning_of(msg)
        think = re.search(r"<think>(.*?)</think>", content, re.S)
        if think:
            reasoning = (reasoning + "\n" + think.group(1)).strip()
            content = (content[: think.start()] + content[think.end() :]).strip()
        turn = _Turn(content=content.strip(), reasoning=reasoning)
        n = len(self.turns) + 1
        if msg.tool_calls:
            for i, tc in enumerate(msg.tool_calls):
                fn = getattr(tc, "function", None)
                name = getattr(fn, "name", "") or ""
                raw = getattr(fn, "arguments", "") or ""
                cid = tc.id or f"call_{n}_{i}"
                if any(c.call_id == cid for c in turn.calls):
                    cid = f"{cid}_{i}"
                turn.calls.append(ToolInvocation(name, _parse_args(raw), cid))
                turn.raw_args[cid] = raw or "{}"
        elif self.mode == "text" or "```tool" in content or "<tool_call>" in content:
            prose, calls = parse_text_tool_calls(content, n)
            turn.content = prose
            for call, raw in calls:
                turn.calls.append(call)
                turn.raw_args[call.call_id] = raw
        return turn


# -- helpers -----------------------------------------------------------------------------------
def estimate_messages(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        total += 4 + estimate_tokens(m.get("content") or "")
        for tc in m.get("tool_calls") or []:
            total += 8 + estimate_tokens(tc["function"]["arguments"])
    return total


def _parse_args(raw: str) -> dict[str, Any]:
    if not raw or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {INVALID_ARGUMENTS_KEY: raw, ARGUMENTS_ERROR_KEY: f"{exc.msg} at line {exc.lineno} column {exc.colno}"}
    if not isinstance(value, dict):
        return {INVALID_ARGUMENTS_KEY: raw, ARGUMENTS_ERROR_KEY: f"expected a JSON object, got {type(value).__name__}"}
    return value


_BLOCK_START = re.compile(r"```tool[ \t]*\n|<tool_call>\s*")


def parse_text_tool_calls(text: str, turn: int) -> tuple[str, list[tuple[ToolInvocation, str]]]:
    """Find ```tool {json}``` (or <tool_call>{json}</tool_call>) blocks. JSON is decoded with
    raw_decode so a ``` inside a string (a file's content) does not end the block early.
    Returns the prose without the blocks and (call, raw JSON) pairs; a block that is not
    valid JSON becomes a call carrying the parse error, which the model is then shown."""
    decoder = json.JSONDecoder()
    calls: list[tuple[ToolInvocation, str]] = []
    prose: list[str] = []
    pos = 0
    while True:
        m = _BLOCK_START.search(text, pos)
        if m is None:
            prose.append(text[pos:])
            break
        prose.append(text[pos : m.start()])
        start = m.end()
        cid = f"call_{turn}_{len(calls)}"
        closer = "</tool_call>" if m.group(0).startswith("<") else "```"
        try:
            obj, end = decoder.raw_decode(text, start)
            raw = text[start:end]
            close = text.find(closer, end)
            pos = len(text) if close < 0 else close + len(closer)
        except json.JSONDecodeError as exc:
            close = text.find(closer, start)
            raw = text[start : close if close >= 0 else len(text)].strip()
            pos = len(text) if close < 0 else close + len(closer)
            name_guess = re.search(r'"name"\s*:\s*"([^"]+)"', raw)
            args = {INVALID_ARGUMENTS_KEY: raw, ARGUMENTS_ERROR_KEY: f"{exc.msg} at line {exc.lineno} column {exc.colno}"}
            calls.append((ToolInvocation(name_guess.group(1) if name_guess else "invalid_tool_block", args, cid), raw))
            continue
        if not isinstance(obj, dict):
            args = {INVALID_ARGUMENTS_KEY: raw, ARGUMENTS_ERROR_KEY: "a tool block must hold a JSON object"}
            calls.append((ToolInvocation("invalid_tool_block", args, cid), raw))
            continue
        name = str(obj.get("name") or obj.get("tool") or "")
        args_value = obj.get("arguments", obj.get("args", {}))
        if isinstance(args_value, str):
            args = _parse_args(args_value)
        elif isinstance(args_value, dict):
            args = args_value
        else:
            args = {INVALID_ARGUMENTS_KEY: json.dumps(args_value), ARGUMENTS_ERROR_KEY: "arguments must be a JSON object"}
        calls.append((ToolInvocation(name, args, cid), json.dumps(args)))
    return "".join(prose).strip(), calls


def _rejects_tools(text: str) -> bool:
    return ("tool" in text or "function" in text) and any(
        w in text for w in ("not support", "unsupported", "does not support", "not supported", "unknown", "unrecognized",
                            "not allowed", "invalid", "extra")
    )


def _reasoning_of(msg: Any) -> str:
    for attr in ("reasoning_content", "reasoning"):
        value = getattr(msg, attr, None)
        if value is None:
            extra = getattr(msg, "model_extra", None) or {}
            value = extra.get(attr)
        if isinstance(value, str) and value:
            return value
    return ""


def _usage_of(resp: Any, messages: list[dict[str, Any]], turn: _Turn) -> tuple[int, int]:
    u = getattr(resp, "usage", None)
    if u is not None and getattr(u, "prompt_tokens", None) is not None:
        return int(u.prompt_tokens or 0), int(u.completion_tokens or 0)
    completion = turn.content + turn.reasoning + "".join(turn.raw_args.values())
    return estimate_messages(messages), estimate_tokens(completion)


def _msg(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return str(exc)
