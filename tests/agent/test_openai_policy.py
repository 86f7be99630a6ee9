"""OpenAIPolicy against a real loopback HTTP server through the real openai client."""

from __future__ import annotations

import json
import socket

import pytest

from agent.chat.parse import parse_text_tool_calls
from agent.errors import PolicyError
from agent.events import BestChanged, ModelMessage, TaskEvent, ToolCall, ToolResult, TurnStarted
from agent.openai_policy import OpenAIPolicy
from agent.policy import Observation, TaskInfo
from agent.testing.scenarios import call, reply
from agent.tools import INVALID_ARGUMENTS_KEY, tool_specs

from .conftest import policy_for

TASK = TaskInfo("t", "class Model:\n    pass\n\ndef get_inputs():\n    return []\n", "cpu", {"torch_ops": "forbid"})


def started(policy: OpenAIPolicy) -> OpenAIPolicy:
    policy.reset(TASK, tool_specs(), [])
    return policy


def test_first_request_carries_system_prompt_task_and_tools(scripted):
    srv = scripted({"replies": [reply(call("list_files"), content="look", reasoning="think first")]})
    action = started(policy_for(srv)).next_action([])
    assert [c.name for c in action.tool_calls] == ["list_files"]
    assert action.message == "look" and action.reasoning == "think first"
    assert action.usage.prompt_tokens > 0 and action.usage.completion_tokens > 0
    body = srv.requests[0]
    assert body["model"] == "scripted-model"
    assert body["messages"][0]["role"] == "system" and "kwrt" in body["messages"][0]["content"]
    assert "Backend: cpu" in body["messages"][0]["content"] and "forbid" in body["messages"][0]["content"]
    assert "class Model" in body["messages"][1]["content"]
    assert [t["function"]["name"] for t in body["tools"]][-1] == "finish"


def test_429_and_500_are_retried_then_succeed(scripted):
    srv = scripted(
        {
            "replies": [
                {"status": 429, "error": "rate limited", "headers": {"retry-after": "0"}},
                {"status": 500, "error": "boom"},
                {"status": 503, "error": "overloaded"},
                reply(call("list_files")),
            ]
        }
    )
    action = started(policy_for(srv)).next_action([])
    assert [c.name for c in action.tool_calls] == ["list_files"]
    assert len(srv.requests) == 4


def test_persistent_server_errors_give_up_with_a_clear_error(scripted):
    srv = scripted({"replies": [{"status": 500}] * 10})
    with pytest.raises(PolicyError, match="kept failing after 3 attempts") as err:
        started(policy_for(srv, max_retries=2)).next_action([])
    assert err.value.kind == "server_error" and len(srv.requests) == 3


def test_rate_limit_that_never_ends_is_reported_as_such(scripted):
    srv = scripted({"replies": [{"status": 429, "headers": {"retry-after": "0"}}] * 10})
    with pytest.raises(PolicyError, match="429") as err:
        started(policy_for(srv, max_retries=1)).next_action([])
    assert err.value.kind == "rate_limited"


def test_wrong_key_is_a_clear_401_error_without_retries(scripted):
    srv = scripted({"api_key": "right", "replies": [reply(call("list_files"))]})
    with pytest.raises(PolicyError, match="rejected the API key") as err:
        started(policy_for(srv, api_key="wrong")).next_action([])
    assert err.value.kind == "auth" and len(srv.requests) == 1


def test_unknown_model_is_a_clear_404_error_listing_served_models(scripted):
    srv = scripted({"models": ["real-model"], "replies": []})
    with pytest.raises(PolicyError, match="'nope' was not found") as err:
        started(policy_for(srv, model="nope")).next_action([])
    assert err.value.kind == "model_not_found" and "real-model" in str(err.value)


def test_unreachable_endpoint_is_reported_after_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    p = OpenAIPolicy(base_url=f"http://127.0.0.1:{port}/v1", model="m", backoff_base_s=0.001, max_retries=1)
    with pytest.raises(PolicyError, match="cannot reach the model endpoint") as err:
        started(p).next_action([])
    assert err.value.kind == "unreachable"


def test_timeouts_are_retried_then_reported(scripted):
    srv = scripted({"replies": [dict(reply(call("list_files")), delay_s=1.0), reply(call("finish"))]})
    action = started(policy_for(srv, timeout_s=0.3)).next_action([])
    assert [c.name for c in action.tool_calls] == ["finish"]  # the slow reply timed out, the retry got the next
    slow = scripted({"replies": [dict(reply(call("list_files")), delay_s=1.0)] * 3})
    with pytest.raises(PolicyError, match="timed out") as err:
        started(policy_for(slow, timeout_s=0.2, max_retries=1)).next_action([])
    assert err.value.kind == "unreachable"


def test_malformed_arguments_and_unknown_tools_are_passed_on_not_raised(scripted):
    srv = scripted(
        {
            "replies": [
                {
                    "tool_calls": [
                        {"name": "write_file", "arguments_raw": '{"path": "a.py", '},
                        {"name": "launch_missiles", "arguments": {}},
                        {"name": "read_file", "arguments_raw": "[1, 2]"},
                    ]
                }
            ]
        }
    )
    action = started(policy_for(srv)).next_action([])
    a, b, c = action.tool_calls
    assert a.name == "write_file" and INVALID_ARGUMENTS_KEY in a.arguments
    assert b.name == "launch_missiles"
    assert "expected a JSON object" in str(c.arguments)


def test_results_are_sent_back_as_tool_messages(scripted):
    srv = scripted({"replies": [reply(call("list_files")), reply(call("finish"))]})
    p = started(policy_for(srv))
    first = p.next_action([])
    cid = first.tool_calls[0].call_id
    p.next_action([Observation(cid, "list_files", "model_new.py 10 chars")])
    msgs = srv.requests[1]["messages"]
    assert msgs[2]["role"] == "assistant" and msgs[2]["tool_calls"][0]["id"] == cid
    assert msgs[3] == {"role": "tool", "tool_call_id": cid, "content": "model_new.py 10 chars"}


def test_switches_to_text_protocol_when_the_endpoint_rejects_tools(scripted):
    srv = scripted(
        {
            "tools_supported": False,
            "replies": [
                reply(call("write_file", path="model_new.py", content="x = '```'\n"), content="writing"),
                reply(call("finish", summary="ok")),
            ],
        }
    )
    p = started(policy_for(srv))
    action = p.next_action([])
    assert p.mode == "text"
    assert [c.name for c in action.tool_calls] == ["write_file"]
    assert action.tool_calls[0].arguments["content"] == "x = '```'\n"
    assert action.message == "writing"
    p.next_action([Observation(action.tool_calls[0].call_id, "write_file", "created model_new.py")])
    # first request had tools (400), the next ones do not, and the system prompt teaches the blocks
    assert "tools" in srv.requests[0] and "tools" not in srv.requests[1] and "tools" not in srv.requests[2]
    assert "```tool" in srv.requests[1]["messages"][0]["content"]
    last = srv.requests[2]["messages"]
    assert last[-1]["role"] == "user" and "created model_new.py" in last[-1]["content"]
    assert "```tool" in last[-2]["content"]


def test_text_block_parser_handles_backticks_in_strings_and_bad_json():
    text = (
        'Plan.\n```tool\n{"name": "write_file", "arguments": {"path": "a.md", "content": "```py\\nx\\n```"}}\n```\n'
        'and\n```tool\n{"name": "compile", "arguments": {oops}\n```\n<tool_call>{"name": "evaluate"}</tool_call>'
    )
    prose, calls = parse_text_tool_calls(text, 1)
    assert prose.startswith("Plan.") and "```" not in prose
    (w, _), (c, _), (e, _) = calls
    assert w.arguments == {"path": "a.md", "content": "```py\nx\n```"}
    assert c.name == "compile" and INVALID_ARGUMENTS_KEY in c.arguments
    assert e.name == "evaluate" and e.arguments == {}


def test_text_only_reply_is_nudged_once(scripted):
    srv = scripted({"replies": [{"content": "I think I should look at the files."}, reply(call("list_files"))]})
    action = started(policy_for(srv)).next_action([])
    assert [c.name for c in action.tool_calls] == ["list_files"]
    assert "look at the files" in action.message
    assert "You did not call a tool" in srv.requests[1]["messages"][-1]["content"]


def test_cost_uses_the_price_table(scripted):
    srv = scripted({"replies": [reply(call("list_files"))]})
    p = started(policy_for(srv, prices={"scripted-model": (1_000_000.0, 2_000_000.0)}))
    a = p.next_action([])
    assert a.usage.cost_usd == pytest.approx(a.usage.prompt_tokens * 1.0 + a.usage.completion_tokens * 2.0)
    srv2 = scripted({"models": ["unknown-x"], "replies": [reply(call("list_files"))]})
    assert started(policy_for(srv2, model="unknown-x")).next_action([]).usage.cost_usd == 0.0


def _history(turns: int, output_chars: int) -> list:
    ev: list = [TaskEvent(name="t", source=TASK.source, backend="cpu")]
    for t in range(1, turns + 1):
        ev += [
            TurnStarted(turn=t),
            ModelMessage(turn=t, content=f"turn {t}"),
            ToolCall(
                turn=t,
                call_id=f"c{t}",
                name="write_file",
                arguments={"path": "k.cpp", "content": f"// v{t}\n" + "x" * output_chars},
            ),
            ToolResult(turn=t, call_id=f"c{t}", name="write_file", content=f"OUTPUT{t} " + "y" * output_chars),
        ]
    ev.append(BestChanged(turn=3, version=3, reward=2, files={"model_new.py": "BEST-CANDIDATE-MARKER"}))
    return ev


def test_resume_rebuilds_the_conversation_from_events(scripted):
    srv = scripted({"replies": [reply(call("finish"))]})
    p = policy_for(srv)
    p.reset(TASK, tool_specs(), _history(3, 10))
    p.next_action([])
    msgs = srv.requests[0]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user"] + ["assistant", "tool"] * 3
    assert msgs[2]["tool_calls"][0]["id"] == "c1" and "OUTPUT1" in msgs[3]["content"]
    assert json.loads(msgs[6]["tool_calls"][0]["function"]["arguments"])["path"] == "k.cpp"


def test_context_management_keeps_system_task_and_best_and_drops_old_outputs(scripted):
    srv = scripted({"replies": [reply(call("finish"))]})
    p = policy_for(srv, context_window=12_000, max_tokens=1000)
    p.reset(TASK, tool_specs(), _history(40, 2000))
    system = p.system_prompt()
    p.next_action([])
    msgs = srv.requests[0]["messages"]
    text = json.dumps(msgs)
    assert msgs[0] == {"role": "system", "content": system}
    assert "class Model" in msgs[1]["content"]
    assert "BEST-CANDIDATE-MARKER" in msgs[1]["content"]  # pinned once older turns are dropped
    assert "earlier turn(s) were removed" in msgs[1]["content"]
    assert "OUTPUT40" in text and "OUTPUT39" in text  # the latest turns stay
    assert "OUTPUT1 " not in text  # the oldest are gone
    assert len(text) / 3.5 < 12_000
    # the protocol stays valid: every tool message follows its assistant message
    for i, m in enumerate(msgs):
        if m["role"] == "tool":
            prev = [x for x in msgs[:i] if x["role"] == "assistant"][-1]
            assert m["tool_call_id"] in [c["id"] for c in prev["tool_calls"]]
