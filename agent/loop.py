"""The agent loop: turn after turn, ask the policy, run its tools, record everything, keep the best.

The loop is the only writer of the trajectory, so every deployment (CLI, Celery, tests) gets
the same events in the same order. It owns the decisions a policy must not be trusted with:
budgets, stop requests, and which candidate is the result. The result is the best VERIFIED
candidate (highest reward, then fastest), never simply the last one, because models often
end a run on a regression.

Event order within a turn: TurnStarted, ModelMessage, then per tool call: ToolCall, the events
the tool produced (FileEdit, CompileEvent, EvaluationEvent, RewardEvent, BestChanged,
ProfileEvent, ErrorEvent), and ToolResult last. A ToolCall without a ToolResult therefore means
the process died while the tool ran; resume answers it with an "interrupted" result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.evaluator import Evaluator, ProgressCallback
from agent.events import (
    BestChanged,
    CompileEvent,
    ErrorEvent,
    EvaluationEvent,
    Event,
    FileEdit,
    Finished,
    ModelMessage,
    ProfileEvent,
    RewardEvent,
    TaskEvent,
    ToolCall,
    ToolResult,
    TurnStarted,
)
from agent.policy import Action, Observation, Policy, TaskInfo
from agent.task import is_task
from agent.tools import ToolOutcome, ToolRunner, eval_result_and_dict, tool_specs
from agent.trajectory import Totals, Trajectory
from agent.workspace import Workspace

MAX_TURNS_LIMIT = 200


@dataclass
class Budgets:
    """Limits of one run. `max_turns` counts all turns of the trajectory (a resumed run
    included); wall time counts from this call of `run`. None means unlimited."""

    max_turns: int = 30
    max_tokens: int | None = None
    max_wall_time_s: float | None = None
    max_cost_usd: float | None = None
    # After the last turn the best candidate is evaluated this many more times, and the
    # evaluation with the median candidate time is the result (`_Run.confirm`): the best of many
    # noisy evaluations is biased towards a lucky one, and its baseline may predate the last samples.
    confirmations: int = 2

    def __post_init__(self) -> None:
        self.max_turns = max(1, min(int(self.max_turns), MAX_TURNS_LIMIT))


@dataclass
class BestCandidate:
    version: int
    reward: int
    files: dict[str, str]
    turn: int
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    candidate_ms: float | None = None
    result: dict[str, Any] | None = field(default=None, repr=False)  # its EvalResult dict

    @classmethod
    def of(cls, version: int, files: dict[str, str], turn: int, result: dict[str, Any]) -> BestCandidate:
        """The candidate as one of its evaluations (an EvalResult dict) measured it."""
        return cls(
            version=version,
            reward=int(result.get("reward") or 0),
            files=files,
            turn=turn,
            speedup_vs_eager=result.get("speedup_vs_eager"),
            speedup_vs_compile=result.get("speedup_vs_compile"),
            candidate_ms=median_ms(result),
            result=result,
        )

    def beats(self, other: BestCandidate | None) -> bool:
        """Higher reward wins; at equal reward the higher speedup vs eager, each measured against
        eager in its own evaluation's paired window (candidate times from different windows are
        never compared: the machine may have changed between them). A tie keeps the earlier one."""
        if other is None:
            return True
        if self.reward != other.reward:
            return self.reward > other.reward
        if self.speedup_vs_eager is not None and other.speedup_vs_eager is not None:
            return self.speedup_vs_eager > other.speedup_vs_eager
        if self.candidate_ms is not None and other.candidate_ms is not None:
            return self.candidate_ms < other.candidate_ms
        return False


@dataclass
class RunResult:
    reason: str  # Finished.reason
    best: BestCandidate | None
    trajectory: Trajectory
    turns: int
    totals: Totals
    overhead_ms: list[float] = field(default_factory=list)  # per turn: loop time minus model and sandbox time

    @property
    def verified(self) -> bool:
        return self.best is not None and self.best.reward >= 1


def task_event(task: TaskInfo, policy: Policy) -> TaskEvent:
    return TaskEvent(
        name=task.name,
        source=task.source,
        task_hash=task.task_hash,
        backend=task.backend,
        options=dict(task.options),
        policy=getattr(policy, "describe", lambda: policy.name)(),
    )


def task_from_trajectory(traj: Trajectory) -> TaskInfo:
    ev = traj.task()
    if ev is None:
        raise ValueError("the trajectory has no task event; it cannot be resumed")
    return TaskInfo(
        name=ev.name, source=ev.source, backend=ev.backend, options=dict(ev.options), task_hash=ev.task_hash
    )


class _Run:
    def __init__(
        self,
        task: TaskInfo,
        policy: Policy,
        evaluator: Evaluator | None,
        budgets: Budgets,
        on_event: Callable[[Event], None] | None,
        stop_requested: Callable[[], bool] | None,
        trajectory: Trajectory | None,
        on_progress: ProgressCallback | None,
        initial_files: dict[str, str] | None,
        journal: str | None,
    ) -> None:
        self.task = task
        self.policy = policy
        self.budgets = budgets
        self.on_event = on_event
        self.stop_requested = stop_requested or (lambda: False)
        self.resumed = trajectory is not None and len(trajectory) > 0
        self.traj = trajectory if trajectory is not None else Trajectory()
        if journal is not None:
            self.traj.attach_journal(journal)
        self.workspace = Workspace(reference=task.source)
        self.runner = ToolRunner(self.workspace, evaluator, task, on_progress=on_progress)
        self.best: BestCandidate | None = None
        self.best_confirmed = False  # the best is the final, confirmed evaluation (set_best)
        self.totals = Totals()
        self.turn = 0
        self.overhead_ms: list[float] = []
        self.initial_files = initial_files or {}

    # -- recording -------------------------------------------------------------------------
    def record(self, event: Event) -> Event:
        self.traj.append(event)
        if self.on_event is not None:
            self.on_event(event)
        return event

    # -- start / resume --------------------------------------------------------------------
    def start(self) -> list[Observation]:
        if not self.resumed:
            self.record(task_event(self.task, self.policy))
            for path, content in sorted(self.initial_files.items()):
                edit = self.workspace.write(path, content)
                self.record(
                    FileEdit(turn=0, path=edit.path, diff=edit.diff, content=edit.content, version=edit.version)
                )
            self.policy.reset(self.task, tool_specs(), [])
            return []
        return self._resume()

    def _resume(self) -> list[Observation]:
        ev = self.traj.task()
        if ev is None:
            raise ValueError("the trajectory has no task event; it cannot be resumed")
        if self.task.task_hash and ev.task_hash and not is_task(ev.task_hash, self.task.source):
            raise ValueError("the trajectory belongs to another task (task hashes differ)")
        evals: dict[int, dict[str, Any]] = {}
        for e in self.traj.events:
            if isinstance(e, FileEdit):
                self.workspace.apply(e.path, e.content, e.version)
            elif isinstance(e, EvaluationEvent):
                evals[e.version] = e.result
            elif isinstance(e, BestChanged):
                self.best = BestCandidate(
                    version=e.version,
                    reward=e.reward,
                    files=dict(e.files),
                    turn=e.turn,
                    speedup_vs_eager=e.speedup_vs_eager,
                    speedup_vs_compile=e.speedup_vs_compile,
                    candidate_ms=median_ms(evals.get(e.version)),
                    result=evals.get(e.version),
                )
        self.totals = self.traj.totals()
        self.turn = self.traj.turns()
        # A tool call the previous process never finished gets an answer, so the history
        # the policy rebuilds is well formed and the model knows to check the workspace.
        observations = []
        for call in self.traj.pending_tool_calls():
            text = "interrupted: the run stopped while this tool was running; check the workspace and run it again if needed"
            self.record(ToolResult(turn=call.turn, call_id=call.call_id, name=call.name, content=text, ok=False))
            observations.append(Observation(call.call_id, call.name, text, ok=False))
        self.policy.reset(self.task, tool_specs(), list(self.traj.events))
        return observations

    # -- the loop --------------------------------------------------------------------------
    def stop_reason(self, started: float) -> str | None:
        b = self.budgets
        if self.stop_requested():
            return "stopped"
        if self.turn >= b.max_turns:
            return "max_turns"
        if b.max_tokens is not None and self.totals.tokens >= b.max_tokens:
            return "max_tokens"
        if b.max_wall_time_s is not None and time.monotonic() - started >= b.max_wall_time_s:
            return "max_wall_time"
        if b.max_cost_usd is not None and self.totals.cost_usd >= b.max_cost_usd:
            return "max_cost"
        return None

    def run(self) -> RunResult:
        started = time.monotonic()
        observations = self.start()
        summary = ""
        while True:
            reason = self.stop_reason(started)
            if reason is not None:
                if reason != "stopped":
                    self.record(ErrorEvent(turn=self.turn, kind="budget", message=f"budget reached: {reason}"))
                break
            self.turn += 1
            t0 = time.perf_counter()
            self.record(TurnStarted(turn=self.turn))
            m0 = time.perf_counter()
            try:
                action = self.policy.next_action(observations)
            except Exception as exc:
                self.record(ErrorEvent(turn=self.turn, kind="model", message=f"{type(exc).__name__}: {exc}"))
                reason, summary = "error", str(exc)
                break
            model_s = time.perf_counter() - m0
            self.record_action(action)
            observations, finished, summary, sandbox_s = self.run_tools(action)
            self.overhead_ms.append((time.perf_counter() - t0 - model_s - sandbox_s) * 1000.0)
            if finished:
                reason = "model_finished"
                break
        return self.finish(reason, summary)

    def record_action(self, action: Action) -> None:
        u = action.usage
        self.totals.prompt_tokens += u.prompt_tokens
        self.totals.completion_tokens += u.completion_tokens
        self.totals.cost_usd += u.cost_usd
        self.record(
            ModelMessage(
                turn=self.turn,
                content=action.message,
                reasoning=action.reasoning,
                prompt_tokens=u.prompt_tokens,
                completion_tokens=u.completion_tokens,
                cost_usd=u.cost_usd,
            )
        )

    def run_tools(self, action: Action) -> tuple[list[Observation], bool, str, float]:
        if not action.tool_calls:
            return [], True, action.message or "the model answered without calling a tool", 0.0
        observations: list[Observation] = []
        finished, summary, sandbox_s = False, "", 0.0
        for call in action.tool_calls:
            args = call.arguments if isinstance(call.arguments, dict) else {"_invalid_arguments": call.arguments}
            self.record(ToolCall(turn=self.turn, call_id=call.call_id, name=call.name, arguments=args))
            if finished:
                text = "skipped: finish was called earlier in this turn"
                self.record(ToolResult(turn=self.turn, call_id=call.call_id, name=call.name, content=text, ok=False))
                observations.append(Observation(call.call_id, call.name, text, ok=False))
                continue
            out = self.runner.execute(call)
            sandbox_s += out.seconds_in_evaluator
            self.record_outcome(out)
            observations.append(Observation(out.call_id, out.name, out.model_content, ok=out.ok, data=out.data))
            if out.finish:
                finished, summary = True, out.summary
        return observations, finished, summary, sandbox_s

    def record_outcome(self, out: ToolOutcome) -> None:
        t, data = self.turn, out.data or {}
        if out.internal_error:
            self.record(ErrorEvent(turn=t, kind="tool", message=out.internal_error))
        if out.edit is not None:
            e = out.edit
            self.record(FileEdit(turn=t, path=e.path, diff=e.diff, content=e.content, version=e.version))
        if out.compile is not None:
            self.record(CompileEvent(turn=t, version=self.workspace.version, result=data["compile"]))
        if out.profile is not None:
            self.record(
                ProfileEvent(
                    turn=t,
                    version=self.workspace.version,
                    rows=data["profile"].get("profile", []),
                    roofline=data["profile"].get("roofline"),
                    text=out.content,
                )
            )
        if out.evaluation is not None:
            self.record_evaluation(out)
        self.record(
            ToolResult(
                turn=t,
                call_id=out.call_id,
                name=out.name,
                content=out.content,
                trimmed_chars=out.trimmed_chars,
                ok=out.ok,
            )
        )

    def record_result(self, version: int, result: dict[str, Any], purpose: str = "") -> None:
        """An evaluation and its reward, as the trajectory records every evaluation."""
        self.record(EvaluationEvent(turn=self.turn, version=version, result=result, purpose=purpose))
        self.record(
            RewardEvent(
                turn=self.turn,
                version=version,
                reward=int(result.get("reward") or 0),
                speedup_vs_eager=result.get("speedup_vs_eager"),
                speedup_vs_compile=result.get("speedup_vs_compile"),
                speed=result.get("speed"),
            )
        )

    def set_best(self, cand: BestCandidate, confirmed: bool = False) -> None:
        """`confirmed`: made from the final evaluation after the last turn (the run's result)."""
        self.best, self.best_confirmed = cand, confirmed
        self.record(
            BestChanged(
                turn=self.turn,
                version=cand.version,
                reward=cand.reward,
                speedup_vs_eager=cand.speedup_vs_eager,
                speedup_vs_compile=cand.speedup_vs_compile,
                files=dict(cand.files),
                speed=(cand.result or {}).get("speed"),
                confirmed=confirmed,
            )
        )

    def record_evaluation(self, out: ToolOutcome) -> None:
        res, v = out.evaluation, self.workspace.version
        result = (out.data or {})["evaluation"]
        self.record_result(v, result)
        note = ""
        if res.status.value == "ok" and int(res.reward) >= 1:
            cand = BestCandidate.of(v, self.workspace.snapshot(), self.turn, result)
            if cand.beats(self.best):
                self.set_best(cand)
                note = f"\nthis is now the best verified candidate (workspace version {v})."
                out.data = {**(out.data or {}), "best": _best_dict(cand)}
        if not note and self.best is not None:
            b = self.best
            note = (
                f"\nbest verified candidate so far: version {b.version}, reward {b.reward}, "
                f"{'n/a' if b.speedup_vs_eager is None else f'{b.speedup_vs_eager:.3f}x'} vs eager."
            )
        elif not note:
            note = "\nno verified candidate yet."
        out.content += note
        out.model_content += note

    def confirm(self, reason: str) -> str:
        """Evaluate the best candidate `Budgets.confirmations` more times and report the evaluation
        with the median candidate time. A confirmation that is not correct removes the best: a
        kernel that passes once and fails on fresh inputs is not verified. Returns a line for the
        summary ("" when nothing was confirmed: no best, no evaluator, or the run was stopped)."""
        b, n = self.best, self.budgets.confirmations
        if b is None or n <= 0 or self.runner.evaluator is None or reason == "stopped" or b.result is None:
            return ""
        draws = [b.result]
        for i in range(n):
            if self.stop_requested():
                return f"confirmation stopped after {i} of {n} evaluations"
            try:
                res, result = eval_result_and_dict(
                    self.runner.evaluator.evaluate(
                        self.task.source, b.files, self.runner.options, on_progress=self.runner.on_progress
                    )
                )
            except Exception as exc:  # an evaluator failure is not the candidate's; the best stays unconfirmed
                self.record(
                    ErrorEvent(turn=self.turn, kind="tool", message=f"confirmation: {type(exc).__name__}: {exc}")
                )
                return f"not confirmed ({type(exc).__name__})"
            self.record_result(b.version, result, purpose="confirmation")
            if res.status.value != "ok" or int(res.reward) < 1:
                why = "; ".join(res.reasons[:2]) or res.status.value
                self.record(
                    ErrorEvent(
                        turn=self.turn,
                        kind="confirmation",
                        message=f"version {b.version} failed its confirmation {i + 1} of {n}: {why}",
                    )
                )
                self.best = None
                return f"version {b.version} failed its confirmation ({res.status.value}): no verified candidate"
            draws.append(result)
        # the draw with the median paired speedup vs eager (each from its own window)
        pick = sorted(draws, key=lambda r: r.get("speedup_vs_eager") or 0.0)[(len(draws) - 1) // 2]
        self.record(
            EvaluationEvent(
                turn=self.turn,
                version=b.version,
                result=pick,
                purpose="final",
                draws_ms=[m for m in (median_ms(r) for r in draws) if m is not None],
            )
        )
        self.set_best(BestCandidate.of(b.version, b.files, b.turn, pick), confirmed=True)
        return f"confirmed: median of {len(draws)} evaluations"

    def finish(self, reason: str, summary: str) -> RunResult:
        confirmed = self.confirm(reason)
        b = self.best
        if b is None and confirmed:
            summary = confirmed  # the best failed its confirmation: that is the outcome
        elif not summary:
            summary = "no verified candidate" if b is None else f"best: version {b.version}, reward {b.reward}"
        if b is not None and confirmed:
            summary = f"{summary} ({confirmed})"
        self.record(
            Finished(
                turn=self.turn,
                reason=reason,
                best_version=b.version if b else None,
                best_reward=b.reward if b else None,
                speedup_vs_eager=b.speedup_vs_eager if b else None,
                speedup_vs_compile=b.speedup_vs_compile if b else None,
                speed=(b.result or {}).get("speed") if b else None,
                confirmed=bool(b) and self.best_confirmed,
                summary=summary,
            )
        )
        self.traj.close()
        return RunResult(reason, b, self.traj, self.turn, self.totals, self.overhead_ms)


def median_ms(result: dict[str, Any] | None, timed: str = "candidate") -> float | None:
    """The median time of one timed callable ("candidate", "eager", "compile") in an evaluation's
    result dict (kernelwright.eval JSON); None where it was not timed. Import it; do not re-read
    the nesting elsewhere."""
    try:
        return float(result["timing"][timed]["median_ms"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None


def _best_dict(b: BestCandidate) -> dict[str, Any]:
    return {
        "version": b.version,
        "reward": b.reward,
        "speedup_vs_eager": b.speedup_vs_eager,
        "speedup_vs_compile": b.speedup_vs_compile,
        "files": dict(b.files),
    }


def run(
    task: TaskInfo,
    policy: Policy,
    evaluator: Evaluator | None,
    budgets: Budgets | None = None,
    on_event: Callable[[Event], None] | None = None,
    stop_requested: Callable[[], bool] | None = None,
    trajectory: Trajectory | None = None,
    *,
    on_progress: ProgressCallback | None = None,
    initial_files: dict[str, str] | None = None,
    journal: str | None = None,
) -> RunResult:
    """Run (or, given a non-empty `trajectory`, resume) an optimisation of `task`.

    on_event(event) is called right after each event is recorded; on_progress(step, detail)
    is the sandbox's per-step progress during evaluations; journal, a path, mirrors every
    event to a JSONL file as it is recorded (crash-safe resume)."""
    return _Run(
        task,
        policy,
        evaluator,
        budgets or Budgets(),
        on_event,
        stop_requested,
        trajectory,
        on_progress,
        initial_files,
        journal,
    ).run()
