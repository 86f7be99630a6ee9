from __future__ import annotations

import json

import pytest

from agent.events import (
    SCHEMA_VERSION,
    BestChanged,
    Finished,
    ModelMessage,
    RewardEvent,
    TaskEvent,
    ToolCall,
    ToolResult,
    TurnStarted,
)
from agent.trajectory import Trajectory, TrajectoryFormatError


def sample() -> Trajectory:
    t = Trajectory()
    t.append(TaskEvent(name="t", source="class Model: ...", backend="cpu"))
    t.append(TurnStarted(turn=1))
    t.append(ModelMessage(turn=1, content="hi", prompt_tokens=100, completion_tokens=10, cost_usd=0.5))
    t.append(ToolCall(turn=1, call_id="a", name="evaluate"))
    t.append(RewardEvent(turn=1, version=1, reward=-1))
    t.append(ToolResult(turn=1, call_id="a", name="evaluate", content="bad"))
    t.append(TurnStarted(turn=2))
    t.append(ModelMessage(turn=2, prompt_tokens=200, completion_tokens=20, cost_usd=0.25))
    t.append(RewardEvent(turn=2, version=2, reward=1))
    t.append(BestChanged(turn=2, version=2, reward=1, files={"model_new.py": "x"}))
    t.append(RewardEvent(turn=2, version=3, reward=2))
    t.append(BestChanged(turn=2, version=3, reward=2, speedup_vs_eager=1.5, files={"model_new.py": "y"}))
    t.append(ToolCall(turn=2, call_id="b", name="compile"))
    return t


def test_save_load_round_trips_every_event(tmp_path):
    t = sample()
    path = t.save(tmp_path / "t.json")
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA_VERSION
    back = Trajectory.load(path)
    assert [e.to_dict() for e in back] == [e.to_dict() for e in t]


def test_summaries():
    t = sample()
    assert t.best().version == 3 and t.best().files == {"model_new.py": "y"}
    assert t.rewards_per_turn() == {1: -1, 2: 2}
    tot = t.totals()
    assert (tot.prompt_tokens, tot.completion_tokens, tot.tokens) == (300, 30, 330)
    assert tot.cost_usd == pytest.approx(0.75)
    assert t.turns() == 2
    assert [c.call_id for c in t.pending_tool_calls()] == ["b"]
    assert t.finished() is None


def test_journal_survives_a_truncated_last_line(tmp_path):
    path = tmp_path / "j.jsonl"
    t = Trajectory(journal=path)
    for e in sample().events:
        t.append(e)
    t.close()
    with open(path, "a") as fh:
        fh.write('{"type": "finished", "reason": "max_tu')  # the process died mid-write
    back = Trajectory.load(path)
    assert len(back) == len(sample())
    assert back.finished() is None


def test_journal_rejects_corruption_in_the_middle(tmp_path):
    path = tmp_path / "j.jsonl"
    Trajectory(sample().events).export(path, "jsonl")
    lines = path.read_text().splitlines()
    lines[3] = "{garbage"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrajectoryFormatError, match=":4"):
        Trajectory.load(path)


def test_attaching_a_journal_writes_existing_events_first(tmp_path):
    t = sample()
    t.attach_journal(tmp_path / "j.jsonl")
    t.append(Finished(turn=2, reason="max_turns"))
    t.close()
    back = Trajectory.load(tmp_path / "j.jsonl")
    assert len(back) == len(t) and back.finished().reason == "max_turns"


def test_unknown_schema_version_is_refused(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schema": "kernelwright.trajectory/999", "events": []}))
    with pytest.raises(TrajectoryFormatError, match="unsupported trajectory schema"):
        Trajectory.load(p)


def test_export_jsonl_loads_back(tmp_path):
    t = sample()
    back = Trajectory.load(t.export(tmp_path / "x.jsonl", "jsonl"))
    assert [e.to_dict() for e in back] == [e.to_dict() for e in t]
    with pytest.raises(ValueError):
        t.export(tmp_path / "x.csv", "csv")
