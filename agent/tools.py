"""The tools a policy can call: their JSON schemas and their execution over a workspace.

Every tool answers with text written for a model (what went wrong and where, what to try),
and every failure the model can cause, from a malformed call to a kernel that does not compile,
is an answer rather than an exception: a run must survive a confused model. Long outputs are
cut in the middle for the model with a note of how much was cut; the loop keeps the full text
in the ToolResult event.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field
from typing import Any

from agent.evaluator import Evaluator, ProgressCallback
from agent.exported_task import is_exported_task
from agent.policy import TOOL_NAMES, TaskInfo, ToolInvocation
from agent.workspace import REFERENCE_PATH, Edit, Workspace, WorkspaceError, check_path

# Set by a policy when the model's arguments were not a JSON object: the tool then answers
# with the parse error instead of running (agent.chat.parse fills these).
INVALID_ARGUMENTS_KEY = "_invalid_arguments"
ARGUMENTS_ERROR_KEY = "_arguments_error"

# Characters of a tool's output the model sees; the rest is cut from the middle.
MODEL_LIMITS = {"read_file": 40_000, "default": 8_000}

KERNEL_SUFFIXES = (".cu", ".cpp")

TOOL_SPECS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List the workspace's files with their sizes. reference.py (the task) is read-only.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a workspace file (or reference.py, the task).",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "relative path, e.g. model_new.py"}},
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": (
                "Create or replace a file: model_new.py (class ModelNew) or kernels/*.cu / kernels/*.cpp "
                '(extern "C" int functions, no torch headers). Returns a diff summary.'
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string", "description": "the complete new file"},
                },
                "required": ["path", "content"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": (
                "Replace one exact occurrence of `old` with `new` in a file. `old` must match the file "
                "exactly (whitespace included) and occur exactly once."
            ),
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["path", "old", "new"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "compile",
            "description": "Compile the workspace's kernel files; returns errors with file and line.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "evaluate",
            "description": (
                "Compile, check correctness against the reference on several random inputs, time against "
                "eager PyTorch and torch.compile, audit the torch ops used, and compute the reward."
            ),
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "profile",
            "description": "Profile the candidate: per-kernel time table and fraction of the hardware speed of light.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "finish",
            "description": "End the run. The best verified candidate so far is the result, not necessarily the last.",
            "parameters": {
                "type": "object",
                "properties": {"summary": {"type": "string", "description": "what you did and found"}},
                "additionalProperties": False,
            },
        },
    },
]

_REQUIRED: dict[str, tuple[str, ...]] = {
    spec["function"]["name"]: tuple(spec["function"]["parameters"].get("required", ())) for spec in TOOL_SPECS
}
assert tuple(_REQUIRED) == TOOL_NAMES, "tool specs must cover agent.policy.TOOL_NAMES in order"


def tool_specs() -> list[dict[str, Any]]:
    return json.loads(json.dumps(TOOL_SPECS))  # a copy the caller may change


def trim_for_model(text: str, limit: int) -> tuple[str, int]:
    """Cut the middle of `text` to at most ~`limit` chars; returns (text, number of chars cut).
    The head keeps the first errors, the tail the final summary, which is where logs say most."""
    if len(text) <= limit:
        return text, 0
    head = int(limit * 0.6)
    tail = limit - head
    cut = len(text) - head - tail
    note = f"\n[... {cut} characters cut from the middle of this output ({len(text)} in all) ...]\n"
    return text[:head] + note + text[-tail:], cut


# Where agent.exported_task's task source carries the .pt2 file (base64, up to the next """).
BLOB_START = '_KW_PT2 = """\n'


def source_for_model(source: str) -> str:
    """The task source as a model reads it (read_file of reference.py, the prompt): a task made
    from a .pt2 carries the file as base64, up to ~940 KiB that tell a model nothing and would
    fill its context, so that part gives way to a one-line marker (the result still parses)."""
    start = source.find(BLOB_START) + len(BLOB_START) if is_exported_task(source) else -1
    end = source.find('"""', start) if start >= len(BLOB_START) else -1
    if end < 0:
        return source
    blob = source[start:end]
    marker = (
        f"[{len(blob)} characters cut: the .pt2 file itself, base64 ({blob.count(chr(10))} lines). "
        "The sandbox loads it with torch.export.load; Model runs its graph, there is nothing to read here.]\n"
    )
    return source[:start] + marker + source[end:]


def limit_for(tool: str) -> int:
    return MODEL_LIMITS.get(tool, MODEL_LIMITS["default"])


@dataclass
class ToolOutcome:
    call_id: str
    name: str
    ok: bool
    content: str  # full text, kept in the trajectory
    model_content: str = ""  # what the model sees
    trimmed_chars: int = 0
    data: dict[str, Any] | None = None
    edit: Edit | None = None
    compile: Any = None  # sandbox.schema.CompileResult
    evaluation: Any = None  # sandbox.schema.EvalResult
    profile: Any = None  # sandbox.schema.EvalResult with profile rows
    finish: bool = False
    summary: str = ""
    internal_error: str = ""  # an infrastructure failure (not the model's fault), for an ErrorEvent
    seconds_in_evaluator: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class ToolRunner:
    """Runs tool calls for one run: the workspace, the evaluator and the task are fixed."""

    def __init__(
        self,
        workspace: Workspace,
        evaluator: Evaluator | None,
        task: TaskInfo,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self.workspace = workspace
        self.evaluator = evaluator
        self.task = task
        self.on_progress = on_progress

    @property
    def options(self) -> dict[str, Any]:
        return {**self.task.options, "backend": self.task.backend}

    def execute(self, call: ToolInvocation) -> ToolOutcome:
        import time

        start = time.perf_counter()
        try:
            out = self._dispatch(call)
        except WorkspaceError as exc:
            out = ToolOutcome(call.call_id, call.name, False, f"error: {exc}")
        except Exception as exc:  # an evaluator or bug: the run goes on, the model is told
            detail = "".join(traceback.format_exception(exc))
            out = ToolOutcome(
                call.call_id,
                call.name,
                False,
                f"internal error while running {call.name}: {type(exc).__name__}: {exc}. "
                "This is not a fault of your code; you may retry.",
                internal_error=detail,
            )
        if out.name in ("compile", "evaluate", "profile"):
            out.seconds_in_evaluator = time.perf_counter() - start
        out.model_content, out.trimmed_chars = trim_for_model(out.content, limit_for(call.name))
        return out

    # -- dispatch --------------------------------------------------------------------------
    def _dispatch(self, call: ToolInvocation) -> ToolOutcome:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        if call.name not in TOOL_NAMES:
            return ToolOutcome(
                call.call_id,
                call.name,
                False,
                f"error: unknown tool {call.name!r}. Available tools: {', '.join(TOOL_NAMES)}.",
            )
        if INVALID_ARGUMENTS_KEY in args or not isinstance(call.arguments, dict):
            raw = args.get(INVALID_ARGUMENTS_KEY, call.arguments)
            why = args.get(ARGUMENTS_ERROR_KEY, "not a JSON object")
            return ToolOutcome(
                call.call_id,
                call.name,
                False,
                f"error: the arguments of {call.name} are not valid JSON ({why}). Received: {str(raw)[:500]!r}. "
                "Send a JSON object with the fields of the tool's schema.",
            )
        missing = [k for k in _REQUIRED[call.name] if k not in args]
        if missing:
            return ToolOutcome(
                call.call_id, call.name, False, f"error: {call.name} needs the argument(s) {', '.join(missing)}"
            )
        bad = [k for k in _REQUIRED[call.name] if not isinstance(args[k], str)]
        if bad:
            return ToolOutcome(call.call_id, call.name, False, f"error: argument(s) {', '.join(bad)} must be strings")
        return getattr(self, f"_tool_{call.name}")(call, args)

    def _tool_list_files(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        rows = self.workspace.listing()
        if not rows:
            text = "the workspace is empty"
        else:
            text = "\n".join(f"{p}  {n} chars{'' if w else '  (read-only: the task)'}" for p, n, w in rows)
        text += f"\nworkspace version {self.workspace.version}"
        return ToolOutcome(call.call_id, call.name, True, text)

    def _tool_read_file(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        text = self.workspace.read(args["path"])
        if check_path(args["path"]) == REFERENCE_PATH:
            text = source_for_model(text)
        return ToolOutcome(call.call_id, call.name, True, text)

    def _tool_write_file(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        edit = self.workspace.write(args["path"], args["content"])
        return ToolOutcome(call.call_id, call.name, True, edit.summary(), edit=edit)

    def _tool_edit_file(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        if args["path"] == REFERENCE_PATH:
            raise WorkspaceError(f"{REFERENCE_PATH!r} is protected: the task file cannot be written")
        edit = self.workspace.edit(args["path"], args["old"], args["new"])
        return ToolOutcome(call.call_id, call.name, True, edit.summary() + "\n" + edit.diff, edit=edit)

    def _require_evaluator(self) -> Evaluator:
        if self.evaluator is None:
            raise RuntimeError("no evaluator configured for this run")
        return self.evaluator

    def _tool_compile(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        files = self.workspace.snapshot()
        if not any(p.endswith(KERNEL_SUFFIXES) for p in files):
            return ToolOutcome(
                call.call_id,
                call.name,
                False,
                "nothing to compile: the workspace has no kernels/*.cu or kernels/*.cpp file yet "
                "(a load_inline candidate is built by evaluate).",
            )
        res, data = compile_result_and_dict(self._require_evaluator().compile(self.task.source, files, self.options))
        return ToolOutcome(
            call.call_id, call.name, bool(res.ok), format_compile(res), compile=res, data={"compile": data}
        )

    def _tool_evaluate(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        files = self.workspace.snapshot()
        if "model_new.py" not in files:
            return ToolOutcome(
                call.call_id, call.name, False, "nothing to evaluate: write model_new.py (class ModelNew) first"
            )
        res, data = eval_result_and_dict(
            self._require_evaluator().evaluate(self.task.source, files, self.options, on_progress=self.on_progress)
        )
        return ToolOutcome(
            call.call_id,
            call.name,
            res.status.value == "ok",
            format_evaluation(res),
            evaluation=res,
            data={"evaluation": data},
        )

    def _tool_profile(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        files = self.workspace.snapshot()
        if "model_new.py" not in files:
            return ToolOutcome(call.call_id, call.name, False, "nothing to profile: write model_new.py first")
        res, data = eval_result_and_dict(self._require_evaluator().profile(self.task.source, files, self.options))
        ok = res.status.value == "ok" or bool(res.profile)
        return ToolOutcome(call.call_id, call.name, ok, format_profile(res), profile=res, data={"profile": data})

    def _tool_finish(self, call: ToolInvocation, args: dict[str, Any]) -> ToolOutcome:
        summary = str(args.get("summary", ""))
        return ToolOutcome(call.call_id, call.name, True, "run finished", finish=True, summary=summary)


# -- result conversion and formatting --------------------------------------------------------
# An evaluator answers with the sandbox's dataclass (in process) or with its JSON form (a remote
# worker's answer, already a dict): each is converted once, the other form kept as it came.
def eval_result_and_dict(res: Any) -> tuple[Any, dict[str, Any]]:
    """(EvalResult, its JSON form) from either."""
    from sandbox.schema import EvalResult

    return (EvalResult.from_dict(res), res) if isinstance(res, dict) else (res, res.to_dict())


def compile_result_and_dict(res: Any) -> tuple[Any, dict[str, Any]]:
    """(CompileResult, its JSON form) from either."""
    from sandbox.schema import CompileResult

    return (CompileResult.from_dict(res), res) if isinstance(res, dict) else (res, res.to_dict())


def _ms(stats: Any) -> str:
    if stats is None:
        return "n/a"
    return f"{stats.median_ms:.4f} ms (min {stats.min_ms:.4f}, spread {stats.spread:.1%}, {stats.trials} runs)"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}x"


def format_compile(res: Any) -> str:
    head = f"compile {'succeeded' if res.ok else 'FAILED'} ({res.mode or 'n/a'}, {res.seconds:.2f} s{', cached' if res.cached else ''})"
    lines = [head]
    for e in res.errors[:30]:
        where = e.file + (f":{e.line}" if e.line is not None else "") + (f":{e.column}" if e.column is not None else "")
        lines.append(f"  {where}: {e.message}")
    if len(res.errors) > 30:
        lines.append(f"  ... {len(res.errors) - 30} more errors")
    if res.log and not res.ok:
        lines += ["compiler log:", res.log]
    return "\n".join(lines)


def _speed_lines(res: Any) -> list[str]:
    """The speedups as the sandbox judged them in its paired window (schema 2: each with its 95%
    interval, "no measurable difference" when it holds 1.0), and why the reward is what it is
    when the window was noisy. A result without `speed` has bare ratios only, and says so."""
    sp = getattr(res, "speed", None)
    if sp is None or not sp.verdict:
        return [
            f"speedup: {_x(res.speedup_vs_eager)} vs eager, {_x(res.speedup_vs_compile)} vs torch.compile (no interval recorded)"
        ]
    lines = [f"speedup: {sp.verdict}"]
    if sp.noisy:
        lines.append(f"  {sp.milestone}")
    return lines


def format_evaluation(res: Any) -> str:
    lines = [f"status: {res.status.value} ({res.verdict.value})"]
    lines += [f"  reason: {r}" for r in res.reasons]
    if res.compile is not None and not res.compile.ok:
        lines.append(format_compile(res.compile))
    if res.trials:
        passed = sum(1 for t in res.trials if t.passed)
        lines.append(f"correctness: {passed}/{len(res.trials)} trials passed")
        for t in res.trials:
            if not t.passed or t.message:
                err = f" max_abs_error={t.max_abs_error:.3g}" if t.max_abs_error is not None else ""
                mism = f" mismatched={t.mismatched}/{t.total}" if t.mismatched is not None else ""
                lines.append(
                    f"  trial {t.index} ({t.kind}): {'pass' if t.passed else 'FAIL'}{err}{mism} {t.message}".rstrip()
                )
    tm = res.timing
    if tm.candidate is not None or tm.eager is not None:
        lines.append(f"timing ({tm.clock or 'clock n/a'}):")
        lines.append(f"  candidate      {_ms(tm.candidate)}")
        lines.append(f"  eager          {_ms(tm.eager)}")
        lines.append(f"  torch.compile  {_ms(tm.compile)}")
        lines += _speed_lines(res)
    au = res.audit
    if au.torch_compute_ops or au.findings or not au.custom_kernel_ran:
        lines.append(f"audit: custom kernel ran: {'yes' if au.custom_kernel_ran else 'NO'}")
        if au.torch_compute_ops:
            lines.append(f"  torch compute ops in forward: {', '.join(au.torch_compute_ops)}")
        lines += [f"  finding: {f}" for f in au.findings]
    lines.append(
        f"reward: {res.reward}  (-1 incorrect, 1 correct, 2 >5% faster than eager, 3 >5% faster than eager and torch.compile)"
    )
    return "\n".join(lines)


def format_profile(res: Any) -> str:
    lines = [f"profile of the candidate (status {res.status.value})"]
    lines += [f"  reason: {r}" for r in res.reasons]
    if res.profile:
        lines.append(f"  {'kernel':<50} {'calls':>6} {'total ms':>10} {'share':>7}")
        for r in res.profile[:40]:
            lines.append(f"  {r.name[:50]:<50} {r.calls:>6} {r.total_ms:>10.4f} {r.share:>7.1%}")
    else:
        lines.append("  no per-kernel rows")
    rf = res.roofline
    if rf is not None:
        frac = "n/a" if rf.fraction_of_sol is None else f"{rf.fraction_of_sol:.1%}"
        lines.append(
            f"speed of light ({rf.device}): {rf.flops:.3g} FLOP, {rf.min_bytes:.3g} bytes minimum, "
            f"{rf.bound}-bound, floor {rf.floor_ms:.4f} ms; candidate at {frac} of it"
        )
        if rf.note:
            lines.append(f"  ({rf.note})")
    return "\n".join(lines)
