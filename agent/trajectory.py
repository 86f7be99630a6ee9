"""A run's history as an append-only list of events, with crash-safe persistence.

Two on-disk forms share one event encoding (agent.events):
- the trajectory file: one JSON object `{"schema": ..., "events": [...]}`, written atomically
  (temp file + rename) so a reader never sees half a file;
- the journal: JSON Lines, a header line then one event per line, appended and flushed as each
  event is recorded, so a run killed mid-turn loses at most the line being written. Loading
  a journal ignores a truncated last line for that reason.
Summary helpers answer the questions every consumer asks (best candidate, rewards per turn,
token and cost totals) in one place instead of each re-walking the events.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agent.events import (
    SCHEMA_VERSION,
    BestChanged,
    Event,
    Finished,
    ModelMessage,
    RewardEvent,
    TaskEvent,
    ToolCall,
    ToolResult,
    TurnStarted,
    event_from_dict,
)


class TrajectoryFormatError(ValueError):
    """The file is not a trajectory of a schema version this code understands."""


@dataclass
class Totals:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Trajectory:
    def __init__(self, events: Iterable[Event] = (), journal: str | os.PathLike[str] | None = None) -> None:
        self.events: list[Event] = list(events)
        self._journal_path: Path | None = None
        self._journal: IO[str] | None = None
        if journal is not None:
            self.attach_journal(journal)

    # -- recording -------------------------------------------------------------------------
    def append(self, event: Event) -> Event:
        self.events.append(event)
        if self._journal is not None:
            self._journal.write(json.dumps(event.to_dict(), separators=(",", ":")) + "\n")
            self._journal.flush()
        return event

    def attach_journal(self, path: str | os.PathLike[str]) -> None:
        """Mirror every recorded event to `path` (JSONL). An existing journal is rewritten from
        the events in memory first, so the file always equals this trajectory."""
        self.close()
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"schema": SCHEMA_VERSION, "kind": "journal"}) + "\n")
            for ev in self.events:
                fh.write(json.dumps(ev.to_dict(), separators=(",", ":")) + "\n")
        self._journal_path = p
        self._journal = open(p, "a", encoding="utf-8")  # lives as long as the trajectory

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    # -- persistence -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, "events": [e.to_dict() for e in self.events]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        _check_schema(data.get("schema"))
        return cls(event_from_dict(e) for e in data.get("events", []))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Atomic write: a crash leaves either the old file or the new one."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.to_dict(), fh, indent=1)
            os.replace(tmp, p)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trajectory:
        """Load a trajectory file or a journal (detected by content)."""
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        first = text.lstrip()[:1]
        if first == "{":
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = None
            if isinstance(data, dict) and "events" in data:
                return cls.from_dict(data)
        return cls(_parse_journal(text.splitlines(), str(p)))

    def export(self, path: str | os.PathLike[str], fmt: str = "json") -> Path:
        """`json` (the trajectory file) or `jsonl` (one event per line, header first)."""
        if fmt == "json":
            return self.save(path)
        if fmt != "jsonl":
            raise ValueError(f"unknown export format {fmt!r} (json or jsonl)")
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"schema": SCHEMA_VERSION, "kind": "journal"})]
        lines += [json.dumps(e.to_dict(), separators=(",", ":")) for e in self.events]
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return p

    # -- summaries -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def of_type(self, cls: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    def task(self) -> TaskEvent | None:
        return next((e for e in self.events if isinstance(e, TaskEvent)), None)

    def best(self) -> BestChanged | None:
        """The last BestChanged: the loop only emits one when the candidate beats the previous best."""
        return next((e for e in reversed(self.events) if isinstance(e, BestChanged)), None)

    def finished(self) -> Finished | None:
        return next((e for e in reversed(self.events) if isinstance(e, Finished)), None)

    def turns(self) -> int:
        """The number of the last started turn (0 when none started)."""
        return max((e.turn for e in self.events if isinstance(e, TurnStarted)), default=0)

    def rewards_per_turn(self) -> dict[int, int]:
        """Best reward reached within each turn that evaluated something."""
        out: dict[int, int] = {}
        for e in self.events:
            if isinstance(e, RewardEvent):
                out[e.turn] = max(out.get(e.turn, e.reward), e.reward)
        return out

    def totals(self) -> Totals:
        t = Totals()
        for e in self.events:
            if isinstance(e, ModelMessage):
                t.prompt_tokens += e.prompt_tokens
                t.completion_tokens += e.completion_tokens
                t.cost_usd += e.cost_usd
        return t

    def pending_tool_calls(self) -> list[ToolCall]:
        """Tool calls without a result: what an interrupted turn left behind."""
        done = {e.call_id for e in self.events if isinstance(e, ToolResult)}
        return [e for e in self.events if isinstance(e, ToolCall) and e.call_id not in done]


def _check_schema(schema: Any) -> None:
    if schema != SCHEMA_VERSION:
        raise TrajectoryFormatError(f"unsupported trajectory schema {schema!r}, expected {SCHEMA_VERSION!r}")


def _parse_journal(lines: list[str], where: str) -> list[Event]:
    lines = [ln for ln in lines if ln.strip()]
    if not lines:
        raise TrajectoryFormatError(f"{where}: empty file")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise TrajectoryFormatError(f"{where}: neither a trajectory file nor a journal") from exc
    _check_schema(header.get("schema") if isinstance(header, dict) else None)
    events: list[Event] = []
    for i, line in enumerate(lines[1:], start=2):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines):  # the line being written when the process died
                break
            raise TrajectoryFormatError(f"{where}:{i}: corrupt journal line") from exc
        events.append(event_from_dict(data))
    return events
