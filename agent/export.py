"""Training data from agent runs: one SFT row per run, or one RL row per step (turn).

Teams building their own kernel agents warm a model up on trajectories (SFT) and then train it
with the sandbox's milestone reward (RL). Both datasets come from the same trajectories the loop
writes (agent.trajectory), so nothing is recorded twice:
- SFT: the conversation as the model saw it, rendered by the code that built the requests
  (agent.openai_policy.OpenAIPolicy.render, tool outputs trimmed as they were shown), in the
  OpenAI chat format with tool calls, plus the tool specs;
- RL: per turn, the state before it (the candidate's files, the previous turn's tool results,
  the last evaluation), the action (message and tool calls), the turn's evaluation and its
  milestone reward (sandbox.schema.milestone_reward applied to the EvalResult).
Rows are versioned (DATASET_SCHEMA, documented in docs/trajectory.md); the web app exports its
jobs through `rows()` as well. No Django here.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from agent.events import EvaluationEvent, FileEdit, ModelMessage, ToolCall, ToolResult, TurnStarted
from agent.tools import limit_for, tool_specs, trim_for_model
from agent.trajectory import Trajectory, TrajectoryFormatError

DATASET_SCHEMA = "kernelwright.dataset/1"
FORMATS = ("sft", "rl")
SUFFIXES = (".jsonl", ".parquet")
# Schema-less objects (their keys vary from row to row) are JSON strings in parquet, so that every
# row has one Arrow type; everything else keeps its structure.
PARQUET_JSON_FIELDS = (("run", "options"), ("tools",), ("evaluation",), ("state", "last_evaluation"))
TRAJECTORY_FILES = ("trajectory.json", "trajectory.jsonl")


class ExportError(ValueError):
    """Bad input for an export (no trajectory found, unknown format); the message says what to do."""


@dataclass
class Run:
    """A trajectory and where it came from: `source` names it in every row (a path, "job:12");
    `extra` adds fields to the row's `run` object (the web app adds the job's id and visibility)."""

    trajectory: Trajectory
    source: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunFilter:
    """Which runs to export: a task (substring of its name, or a prefix of its hash), the best
    reward at least `min_reward`, started within [since, until]."""

    task: str = ""
    min_reward: int | None = None
    since: datetime | None = None
    until: datetime | None = None

    def accepts(self, traj: Trajectory) -> bool:
        task = traj.task()
        if task is None:
            return False
        if self.task and self.task.lower() not in task.name.lower() and not task.task_hash.startswith(self.task):
            return False
        best = best_reward(traj)
        if self.min_reward is not None and (best is None or best < self.min_reward):
            return False
        started = datetime.fromtimestamp(task.ts, UTC)
        return not (self.since and started < self.since or self.until and started > self.until)


def best_reward(traj: Trajectory) -> int | None:
    best = traj.best()
    return best.reward if best is not None else None


def milestone(result: dict[str, Any]) -> int:
    """The reward of one evaluation, recomputed by the sandbox's rule from its EvalResult; the
    recorded `reward` for a result of an older schema, which EvalResult no longer reads."""
    from sandbox.schema import EvalResult, milestone_reward

    try:
        res = EvalResult.from_dict(result)
    except (ValueError, TypeError, KeyError):
        return int(result.get("reward", -1))
    if res.speed is not None:
        return milestone_reward(res.correct, res.speed.vs_eager, res.speed.vs_compile, noisy=res.speed.noisy)
    return milestone_reward(res.correct, res.speedup_vs_eager, res.speedup_vs_compile)


def run_info(run: Run) -> dict[str, Any]:
    """What every row says about its run."""
    traj = run.trajectory
    task, best, fin = traj.task(), traj.best(), traj.finished()
    assert task is not None
    return {
        "source": run.source,
        "task": task.name,
        "task_hash": task.task_hash,
        "backend": task.backend,
        "policy": task.policy,
        "options": dict(task.options),
        "started_at": datetime.fromtimestamp(task.ts, UTC).isoformat(),
        "turns": traj.turns(),
        "finished": fin.reason if fin else None,
        "best_reward": best.reward if best else None,
        "speedup_vs_eager": best.speedup_vs_eager if best else None,
        "speedup_vs_compile": best.speedup_vs_compile if best else None,
        **run.extra,
    }


def conversation(traj: Trajectory) -> list[dict[str, Any]]:
    """The run's messages in the OpenAI chat format, rendered by the policy's own code."""
    from agent.loop import task_from_trajectory
    from agent.openai_policy import OpenAIPolicy

    policy = OpenAIPolicy(base_url="http://127.0.0.1:9/v1", api_key="export", tool_mode="native")  # never called
    policy.reset(task_from_trajectory(traj), tool_specs(), traj.events)
    return [_chat_message(m) for m in policy.render()]


def _chat_message(msg: dict[str, Any]) -> dict[str, Any]:
    """Every message with the same keys (parquet needs one type per column; null where unused)."""
    return {
        "role": msg["role"],
        "content": msg.get("content"),
        "tool_calls": msg.get("tool_calls"),
        "tool_call_id": msg.get("tool_call_id"),
    }


def sft_row(run: Run) -> dict[str, Any]:
    return {
        "schema": DATASET_SCHEMA,
        "kind": "sft",
        "run": run_info(run),
        "messages": conversation(run.trajectory),
        "tools": tool_specs(),
    }


@dataclass
class _Step:
    turn: int
    message: str = ""
    reasoning: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    evaluation: dict[str, Any] | None = None


def _steps(traj: Trajectory) -> Iterator[tuple[_Step, dict[str, str], int]]:
    """Each turn with the candidate's files and workspace version from before it."""
    files: dict[str, str] = {}
    version = 0
    step: _Step | None = None
    before: tuple[dict[str, str], int] = ({}, 0)
    for e in traj.events:
        if isinstance(e, TurnStarted):
            if step is not None:
                yield step, *before
            step, before = _Step(turn=e.turn), (dict(files), version)
        elif isinstance(e, FileEdit):
            files[e.path], version = e.content, e.version
        elif step is None:
            continue
        elif isinstance(e, ModelMessage):
            step.message, step.reasoning = e.content, e.reasoning
        elif isinstance(e, ToolCall):
            step.calls.append({"id": e.call_id, "name": e.name, "arguments": json.dumps(e.arguments)})
        elif isinstance(e, ToolResult):
            shown = trim_for_model(e.content, limit_for(e.name))[0]
            step.results.append({"call_id": e.call_id, "name": e.name, "content": shown, "ok": e.ok})
        elif isinstance(e, EvaluationEvent) and not e.purpose:
            step.evaluation = e.result
    if step is not None:
        yield step, *before


def rl_rows(run: Run) -> Iterator[dict[str, Any]]:
    info = run_info(run)
    previous: _Step | None = None
    last_eval: dict[str, Any] | None = None
    steps = list(_steps(run.trajectory))
    for i, (step, files, version) in enumerate(steps):
        yield {
            "schema": DATASET_SCHEMA,
            "kind": "rl",
            "run": info,
            "step": step.turn,
            "last": i == len(steps) - 1,
            "state": {
                "files": [{"path": p, "content": c} for p, c in sorted(files.items())],
                "version": version,
                "last_results": previous.results if previous else [],
                "last_evaluation": last_eval,
            },
            "action": {"message": step.message, "reasoning": step.reasoning, "tool_calls": step.calls},
            "evaluation": step.evaluation,
            "reward": milestone(step.evaluation) if step.evaluation is not None else None,
        }
        previous, last_eval = step, step.evaluation or last_eval


def rows(runs: Iterable[Run], fmt: str) -> Iterator[dict[str, Any]]:
    if fmt not in FORMATS:
        raise ExportError(f"unknown dataset format {fmt!r}: sft or rl")
    for run in runs:
        if run.trajectory.task() is None:
            continue  # an empty job (never started) has nothing to learn from
        if fmt == "sft":
            yield sft_row(run)
        else:
            yield from rl_rows(run)


# -- files -------------------------------------------------------------------------------------------
def write_jsonl(items: Iterable[dict[str, Any]], out: IO[str]) -> int:
    n = 0
    for row in items:
        out.write(json.dumps(row, separators=(",", ":")) + "\n")
        n += 1
    return n


def _parquet_ready(row: dict[str, Any]) -> dict[str, Any]:
    row = json.loads(json.dumps(row))  # a deep copy
    for path in PARQUET_JSON_FIELDS:
        holder = row
        for key in path[:-1]:
            holder = holder.get(key) or {}
        if path[-1] in holder:
            holder[path[-1]] = json.dumps(holder[path[-1]])
    return row


def parquet_bytes(items: Iterable[dict[str, Any]]) -> tuple[bytes, int]:
    """The rows as one parquet file (readable by Hugging Face `datasets`); needs pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ExportError(
            "parquet needs pyarrow, which is not installed: pip install 'kernelwright[datasets]' "
            "(or write .jsonl, which needs nothing)"
        ) from exc
    table = pa.Table.from_pylist([_parquet_ready(r) for r in items])
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue(), table.num_rows


def write(items: Iterable[dict[str, Any]], path: Path) -> int:
    """Write .jsonl or .parquet (by suffix); returns the number of rows."""
    if path.suffix not in SUFFIXES:
        raise ExportError(f"{path}: the output must end in .jsonl or .parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        data, n = parquet_bytes(items)
        path.write_bytes(data)
        return n
    with open(path, "w", encoding="utf-8") as fh:
        return write_jsonl(items, fh)


def find_trajectories(paths: Iterable[str | Path]) -> list[Path]:
    """A trajectory file as given; a run folder's trajectory.json (else its journal); a folder of
    run folders searched below."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            own = [p / n for n in TRAJECTORY_FILES if (p / n).is_file()]
            found += own[:1] or find_trajectories(sorted(c for c in p.iterdir() if c.is_dir()))
        else:
            raise ExportError(f"{p}: no such file or folder")
    return found


def load_runs(paths: Iterable[str | Path], keep: RunFilter) -> Iterator[Run]:
    for path in find_trajectories(paths):
        try:
            traj = Trajectory.load(path)
        except (TrajectoryFormatError, ValueError) as exc:
            raise ExportError(f"{path}: not a trajectory ({exc})") from exc
        if keep.accepts(traj):
            yield Run(traj, str(path))


# -- command line ------------------------------------------------------------------------------------
def _date(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO date: {text!r} (e.g. 2026-11-30 or 2026-11-30T12:00)") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def add_parser(sub: Any) -> None:
    """`python -m agent export`: registered by agent.__main__."""
    e = sub.add_parser("export", help="training data (SFT or RL rows) from run folders or trajectory files")
    e.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders, folders of runs, or trajectory files")
    e.add_argument("--format", choices=FORMATS, required=True, help="sft: one row per run; rl: one row per turn")
    e.add_argument("--out", required=True, help="FILE.jsonl or FILE.parquet (parquet needs pyarrow)")
    e.add_argument("--task", default="", help="only runs whose task name contains this (or whose hash starts so)")
    e.add_argument("--min-reward", type=int, default=None, help="only runs whose best reward is at least this")
    e.add_argument("--since", type=_date, default=None, help="only runs started on or after this date (UTC)")
    e.add_argument("--until", type=_date, default=None, help="only runs started on or before this date (UTC)")
    e.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    keep = RunFilter(task=args.task, min_reward=args.min_reward, since=args.since, until=args.until)
    try:
        n = write(rows(load_runs(args.runs, keep), args.format), Path(args.out))
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} {args.format} row(s) to {args.out}")
    return 0
