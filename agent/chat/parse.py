"""A reply of the endpoint as a turn: native tool calls, or ```tool {json}``` (and
<tool_call>) blocks in the text; reasoning from the reply's fields or <think> tags; the
usage the endpoint reported, else an estimate. Malformed arguments become a call carrying the
parse error (agent.tools answers it with that error instead of running)."""

from __future__ import annotations

import json
import re
from typing import Any

from agent.chat.history import Turn
from agent.chat.render import estimate_messages, estimate_tokens
from agent.policy import ToolInvocation
from agent.tools import ARGUMENTS_ERROR_KEY, INVALID_ARGUMENTS_KEY

_BLOCK_START = re.compile(r"```tool[ \t]*\n|<tool_call>\s*")


def reply_turn(resp: Any, mode: str, number: int) -> Turn:
    """The reply `resp` as turn `number` (1-based) under the tool protocol `mode`."""
    choices = getattr(resp, "choices", None) or []
    if not choices:
        return Turn(content="(the endpoint returned no choices)")
    msg = choices[0].message
    content = msg.content or ""
    reasoning = reasoning_of(msg)
    think = re.search(r"<think>(.*?)</think>", content, re.S)
    if think:
        reasoning = (reasoning + "\n" + think.group(1)).strip()
        content = (content[: think.start()] + content[think.end() :]).strip()
    turn = Turn(content=content.strip(), reasoning=reasoning)
    if msg.tool_calls:
        for i, tc in enumerate(msg.tool_calls):
            fn = getattr(tc, "function", None)
            name = getattr(fn, "name", "") or ""
            raw = getattr(fn, "arguments", "") or ""
            cid = tc.id or f"call_{number}_{i}"
            if any(c.call_id == cid for c in turn.calls):
                cid = f"{cid}_{i}"
            turn.calls.append(ToolInvocation(name, parse_arguments(raw), cid))
            turn.raw_args[cid] = raw or "{}"
    elif mode == "text" or "```tool" in content or "<tool_call>" in content:
        prose, calls = parse_text_tool_calls(content, number)
        turn.content = prose
        for call, raw in calls:
            turn.calls.append(call)
            turn.raw_args[call.call_id] = raw
    return turn


def parse_arguments(raw: str) -> dict[str, Any]:
    if not raw or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {INVALID_ARGUMENTS_KEY: raw, ARGUMENTS_ERROR_KEY: f"{exc.msg} at line {exc.lineno} column {exc.colno}"}
    if not isinstance(value, dict):
        return {INVALID_ARGUMENTS_KEY: raw, ARGUMENTS_ERROR_KEY: f"expected a JSON object, got {type(value).__name__}"}
    return value


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
            args = {
                INVALID_ARGUMENTS_KEY: raw,
                ARGUMENTS_ERROR_KEY: f"{exc.msg} at line {exc.lineno} column {exc.colno}",
            }
            calls.append((ToolInvocation(name_guess.group(1) if name_guess else "invalid_tool_block", args, cid), raw))
            continue
        calls.append(_block_call(obj, raw, cid))
    return "".join(prose).strip(), calls


def _block_call(obj: Any, raw: str, cid: str) -> tuple[ToolInvocation, str]:
    """One decoded tool block as a call: {"name": ..., "arguments": {...} or a JSON string}."""
    if not isinstance(obj, dict):
        args: dict[str, Any] = {INVALID_ARGUMENTS_KEY: raw, ARGUMENTS_ERROR_KEY: "a tool block must hold a JSON object"}
        return ToolInvocation("invalid_tool_block", args, cid), raw
    name = str(obj.get("name") or obj.get("tool") or "")
    args_value = obj.get("arguments", obj.get("args", {}))
    if isinstance(args_value, str):
        args = parse_arguments(args_value)
    elif isinstance(args_value, dict):
        args = args_value
    else:
        args = {INVALID_ARGUMENTS_KEY: json.dumps(args_value), ARGUMENTS_ERROR_KEY: "arguments must be a JSON object"}
    return ToolInvocation(name, args, cid), json.dumps(args)


def reasoning_of(msg: Any) -> str:
    for attr in ("reasoning_content", "reasoning"):
        value = getattr(msg, attr, None)
        if value is None:
            extra = getattr(msg, "model_extra", None) or {}
            value = extra.get(attr)
        if isinstance(value, str) and value:
            return value
    return ""


def usage_of(resp: Any, messages: list[dict[str, Any]], turn: Turn) -> tuple[int, int]:
    """(prompt, completion) tokens: the endpoint's count, else an estimate."""
    u = getattr(resp, "usage", None)
    if u is not None and getattr(u, "prompt_tokens", None) is not None:
        return int(u.prompt_tokens or 0), int(u.completion_tokens or 0)
    completion = turn.content + turn.reasoning + "".join(turn.raw_args.values())
    return estimate_messages(messages), estimate_tokens(completion)
