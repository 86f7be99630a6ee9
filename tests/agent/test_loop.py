"""The loop's budgets, stop requests, event stream and crash-resume, driven by a scripted model
over real HTTP. These runs only touch files; the sandbox runs are in test_e2e_cpu.py."""

from __future__ import annotations

import pytest

from agent.events import ErrorEvent, Finished, ModelMessage, TaskEvent, ToolCall, ToolResult, TurnStarted
from agent.loop import Budgets, run, task_from_trajectory
from agent.testing.scenarios import call, reply
from agent.trajectory import Trajectory

from .conftest import policy_for


def looping_script(n: int = 50) -> dict:
    return {"replies": [reply(call("list_files")) for _ in range(n)]}


def test_max_turns_budget_stops_the_run(scripted, softmax_task):
    srv = scripted(looping_script())
    res = run(softmax_task, policy_for(srv), None, Budgets(max_turns=3))
    assert res.reason == "max_turns" and res.turns == 3 and len(srv.requests) == 3
    assert res.best is None and not res.verified
    errors = res.trajectory.of_type(ErrorEvent)
    assert errors[-1].kind == "budget" and "max_turns" in errors[-1].message
    assert res.trajectory.finished().reason == "max_turns"


def test_max_turns_is_clamped_to_200():
    assert Budgets(max_turns=10_000).max_turns == 200
    assert Budgets().max_turns == 30


def test_token_and_cost_budgets(scripted, softmax_task):
    srv = scripted(looping_script())
    res = run(softmax_task, policy_for(srv), None, Budgets(max_turns=50, max_tokens=5000))
    assert res.reason == "max_tokens" and res.totals.tokens >= 5000
    assert res.turns < 50
    srv2 = scripted(looping_script())
    pol = policy_for(srv2, prices={"scripted-model": (10.0, 10.0)})  # $10 per million tokens
    res2 = run(softmax_task, pol, None, Budgets(max_turns=50, max_cost_usd=0.05))
    assert res2.reason == "max_cost" and res2.totals.cost_usd >= 0.05


def test_wall_time_budget(scripted, softmax_task):
    srv = scripted({"replies": [dict(reply(call("list_files")), delay_s=0.2) for _ in range(20)]})
    res = run(softmax_task, policy_for(srv), None, Budgets(max_turns=20, max_wall_time_s=0.5))
    assert res.reason == "max_wall_time" and 2 <= res.turns <= 4


def test_stop_request_is_honoured_between_turns(scripted, softmax_task):
    srv = scripted(looping_script())
    seen: list = []

    def on_event(e):
        seen.append(e)

    res = run(
        softmax_task,
        policy_for(srv),
        None,
        Budgets(max_turns=30),
        on_event=on_event,
        stop_requested=lambda: sum(isinstance(e, ToolResult) for e in seen) >= 2,
    )
    assert res.reason == "stopped" and res.turns == 2
    # on_event saw every recorded event, in order, right as it was recorded
    assert [e.to_dict() for e in seen] == [e.to_dict() for e in res.trajectory.events]
    assert isinstance(seen[0], TaskEvent) and isinstance(seen[-1], Finished)


def test_policy_failure_ends_the_run_with_an_error_event(scripted, softmax_task):
    srv = scripted({"api_key": "right", "replies": []})
    res = run(softmax_task, policy_for(srv, api_key="wrong"), None, Budgets(max_turns=5))
    assert res.reason == "error"
    err = res.trajectory.of_type(ErrorEvent)[0]
    assert err.kind == "model" and "401" in err.message


def test_finish_ends_the_run_and_later_calls_in_the_turn_are_skipped(scripted, softmax_task):
    srv = scripted({"replies": [reply(call("finish", summary="all done"), call("list_files"))]})
    res = run(softmax_task, policy_for(srv), None, Budgets(max_turns=5))
    assert res.reason == "model_finished" and res.trajectory.finished().summary == "all done"
    results = res.trajectory.of_type(ToolResult)
    assert results[-1].name == "list_files" and results[-1].content.startswith("skipped")


def test_malformed_tool_calls_are_shown_to_the_model_and_the_run_goes_on(scripted, softmax_task):
    srv = scripted(
        {
            "replies": [
                {
                    "tool_calls": [
                        {"name": "write_file", "arguments_raw": '{"path": '},
                        {"name": "nuke", "arguments": {}},
                    ]
                },
                reply(call("write_file", path="model_new.py", content="x = 1\n")),
                reply(call("finish")),
            ]
        }
    )
    res = run(softmax_task, policy_for(srv), None, Budgets(max_turns=5))
    assert res.reason == "model_finished"
    first = [r for r in res.trajectory.of_type(ToolResult) if r.turn == 1]
    assert [r.ok for r in first] == [False, False]
    tool_msgs = [m for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in tool_msgs[0]["content"] and "unknown tool 'nuke'" in tool_msgs[1]["content"]
    assert res.trajectory.of_type(ToolResult)[-2].ok  # the corrected write went through


class Crash(Exception):
    pass


def test_resume_after_a_crash_mid_tool_rebuilds_workspace_and_continues(scripted, softmax_task, tmp_path):
    journal = tmp_path / "run.jsonl"
    srv = scripted(
        {
            "replies": [
                reply(call("write_file", path="model_new.py", content="v = 1\n")),
                reply(call("edit_file", path="model_new.py", old="v = 1", new="v = 2"), call("list_files")),
            ]
        }
    )

    def crash_on_list(e):
        if isinstance(e, ToolCall) and e.name == "list_files":
            raise Crash()

    with pytest.raises(Crash):
        run(softmax_task, policy_for(srv), None, Budgets(max_turns=10), on_event=crash_on_list, journal=str(journal))

    traj = Trajectory.load(journal)
    assert traj.finished() is None and [c.name for c in traj.pending_tool_calls()] == ["list_files"]
    srv2 = scripted({"replies": [reply(call("read_file", path="model_new.py")), reply(call("finish"))]})
    res = run(
        task_from_trajectory(traj), policy_for(srv2), None, Budgets(max_turns=10), trajectory=traj, journal=str(journal)
    )
    assert res.reason == "model_finished" and res.turns == 4
    # the interrupted call got an answer, and the resumed model saw the whole history
    interrupted = [r for r in res.trajectory.of_type(ToolResult) if r.name == "list_files"]
    assert interrupted and interrupted[0].content.startswith("interrupted")
    roles = [m["role"] for m in srv2.requests[0]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    read = [r for r in res.trajectory.of_type(ToolResult) if r.name == "read_file"][0]
    assert read.content == "v = 2\n"  # the workspace was rebuilt from the recorded edits
    assert [e.turn for e in res.trajectory.of_type(TurnStarted)] == [1, 2, 3, 4]
    assert len(res.trajectory.of_type(ModelMessage)) == 4
    again = Trajectory.load(journal)
    assert [e.to_dict() for e in again] == [e.to_dict() for e in res.trajectory]
