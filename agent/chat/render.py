"""A turn of the conversation as chat messages, in the native protocol (assistant tool_calls and
`tool` messages) or the text one (```tool blocks, results in a user message). Older turns are
rendered at a compaction level: 0 as they were, 1 and 2 with long texts and arguments cut."""

from __future__ import annotations

import json
from typing import Any

from agent.chat.history import Turn
from agent.chat.prompts import NUDGE
from agent.policy import ToolInvocation

CHARS_PER_TOKEN = 3.5  # conservative for code-heavy text: estimates err on the large side
NO_RESULT = "(no result: the run was interrupted before this tool ran)"


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def estimate_messages(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        total += 4 + estimate_tokens(m.get("content") or "")
        for tc in m.get("tool_calls") or []:
            total += 8 + estimate_tokens(tc["function"]["arguments"])
    return total


def shorten(text: str, level: int, what: str) -> str:
    keep = {0: None, 1: 600, 2: 200}[level]
    if keep is None or len(text) <= keep:
        return text
    return (
        text[: keep // 2]
        + f"\n[... older {what} shortened to fit the context: {len(text) - keep // 2} chars dropped ...]"
    )


def arguments(turn: Turn, call: ToolInvocation, level: int) -> str:
    """The call's arguments as the model sent them, long string values elided above level 0."""
    raw = turn.raw_args.get(call.call_id) or json.dumps(call.arguments)
    if level == 0 or len(raw) <= 600 or not isinstance(call.arguments, dict):
        return raw
    args = {
        k: (v if not isinstance(v, str) or len(v) <= 300 else f"[{len(v)} chars elided to fit the context]")
        for k, v in call.arguments.items()
    }
    return json.dumps(args)


def turn_messages(turn: Turn, level: int, mode: str) -> list[dict[str, Any]]:
    if not turn.content and not turn.calls:
        return []  # a turn interrupted before the model answered (resume), or an empty reply
    msgs = native(turn, level) if mode == "native" else text(turn, level)
    if turn.nudged:
        msgs.append({"role": "user", "content": NUDGE})
    return msgs


def native(turn: Turn, level: int) -> list[dict[str, Any]]:
    msg: dict[str, Any] = {"role": "assistant", "content": shorten(turn.content, level, "message") or None}
    if turn.calls:
        msg["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": arguments(turn, c, level)}}
            for c in turn.calls
        ]
    elif msg["content"] is None:
        msg["content"] = ""
    out = [msg]
    for c in turn.calls:
        result = turn.results.get(c.call_id, NO_RESULT)
        out.append({"role": "tool", "tool_call_id": c.call_id, "content": shorten(result, level, "tool output")})
    return out


def text(turn: Turn, level: int) -> list[dict[str, Any]]:
    blocks = []
    for c in turn.calls:
        args = arguments(turn, c, level)
        try:
            body = json.dumps({"name": c.name, "arguments": json.loads(args)})
        except json.JSONDecodeError:
            body = '{"name": ' + json.dumps(c.name) + ', "arguments": ' + args + "}"
        blocks.append(f"```tool\n{body}\n```")
    content = "\n\n".join(x for x in [shorten(turn.content, level, "message")] + blocks if x)
    out: list[dict[str, Any]] = [{"role": "assistant", "content": content or "(no reply)"}]
    if turn.calls:
        parts = []
        for c in turn.calls:
            result = turn.results.get(c.call_id, NO_RESULT)
            parts.append(f"### result of {c.name} (call {c.call_id})\n{shorten(result, level, 'tool output')}")
        out.append({"role": "user", "content": "Tool results:\n\n" + "\n\n".join(parts)})
    return out
