"""Command line: optimise a task turn by turn and keep the best verified candidate.

    python -m agent optimize TASK.py [--backend cpu|cuda|auto] [--model NAME] [--base-url URL]
                                     [--api-key KEY] [--max-turns N] [--out DIR] [--resume TRAJ]
    python -m agent optimize FILE.py --class NAME [--init JSON] --inputs SPEC [SPEC ...] [...]
    python -m agent optimize MODEL.pt2 [...]
    python -m agent show TRAJ.json

TASK.py is a KernelBench-format task. Any other file with nn.Module subclasses runs as one with
--class (agent.module_task writes the task, as the web form does); an ExportedProgram saved with
torch.export.save runs from its .pt2 file (agent.exported_task: the file is loaded only inside
the sandbox, and the inputs are random values of the recorded shapes and dtypes).
    python -m agent export RUN_DIR... --format sft|rl --out FILE.jsonl|FILE.parquet

Progress goes to stderr (a bar and one line per turn), the final result to stdout. Without a
model endpoint (no --base-url, no OPENAI_BASE_URL / OPENAI_API_KEY) the built-in offline
policy runs. The journal DIR/trajectory.jsonl is written as events happen, so an interrupted
run can be continued with --resume DIR/trajectory.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from agent.events import (
    BestChanged,
    ErrorEvent,
    EvaluationEvent,
    Event,
    Finished,
    ModelMessage,
    RewardEvent,
    ToolCall,
    TurnStarted,
)
from agent.policy import DEFAULT_MODEL
from agent.trajectory import Trajectory
from sandbox.options import BACKENDS, PRECISIONS, PRESETS, TORCH_OPS

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NO_CANDIDATE = 0, 1, 2, 3


class Progress:
    """Turns events into one stderr line per turn, prefixed by a progress bar."""

    def __init__(self, max_turns: int, stream: Any = None) -> None:
        self.max_turns = max_turns
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.turn = 0
        self.tools: list[str] = []
        self.rewards: list[int] = []
        self.tokens = 0
        self.cost = 0.0
        self.best: BestChanged | None = None
        self.errors: list[str] = []
        self.started = time.monotonic()

    def bar(self, turn: int) -> str:
        width = 20
        filled = min(width, round(width * turn / max(1, self.max_turns)))
        return "[" + "#" * filled + "." * (width - filled) + f"] {turn:>3}/{self.max_turns}"

    def on_event(self, ev: Event) -> None:
        if isinstance(ev, TurnStarted):
            self.flush()
            self.turn, self.tools, self.rewards, self.errors = ev.turn, [], [], []
        elif isinstance(ev, ModelMessage):
            self.tokens += ev.prompt_tokens + ev.completion_tokens
            self.cost += ev.cost_usd
        elif isinstance(ev, ToolCall):
            self.tools.append(ev.name)
        elif isinstance(ev, RewardEvent):
            self.rewards.append(ev.reward)
        elif isinstance(ev, BestChanged):
            self.best = ev
        elif isinstance(ev, ErrorEvent):
            self.errors.append(ev.message.strip().splitlines()[-1][:120] if ev.message.strip() else ev.kind)
        elif isinstance(ev, Finished):
            self.flush()
            self.write(f"finished: {ev.reason}" + (f" ({ev.summary})" if ev.summary else ""))

    def on_progress(self, step: str, detail: dict[str, Any]) -> None:
        if self.tty:
            self.stream.write(f"\r  ... turn {self.turn}: {step:<40}")
            self.stream.flush()

    def flush(self) -> None:
        if self.turn == 0:
            return
        best = "none"
        if self.best is not None:
            sp = self.best.speedup_vs_eager
            best = f"v{self.best.version} r{self.best.reward}" + (f" {sp:.2f}x eager" if sp else "")
        reward = ("reward " + ",".join(str(r) for r in self.rewards)) if self.rewards else "no eval"
        tools = ", ".join(self.tools) or "(no tool)"
        err = f" | error: {self.errors[-1]}" if self.errors else ""
        line = (
            f"{self.bar(self.turn)} {tools[:60]} | {reward} | best {best} | "
            f"{self.tokens:,} tok ${self.cost:.4f} | {time.monotonic() - self.started:.0f}s{err}"
        )
        self.write(line)
        self.turn = 0

    def write(self, line: str) -> None:
        prefix = "\r\x1b[K" if self.tty else ""
        self.stream.write(prefix + line + "\n")
        self.stream.flush()


def _use_model(args: argparse.Namespace) -> bool:
    if args.policy != "auto":
        return args.policy == "openai"
    return bool(args.base_url or args.api_key or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY"))


def make_policy(args: argparse.Namespace) -> Any:
    if _use_model(args):
        from agent.openai_policy import OpenAIPolicy

        return OpenAIPolicy(
            base_url=args.base_url,
            api_key=args.api_key,
            model=args.model,
            temperature=args.temperature,
            max_tokens=args.max_completion_tokens,
            tool_mode=args.tool_mode,
            context_window=args.context_window,
            max_retries=args.retries,
        )
    try:
        from agent.builtin import BuiltinPolicy
    except ImportError as exc:
        raise SystemExit(
            f"error: no model endpoint configured and the built-in policy is unavailable ({exc}). "
            "Pass --base-url URL (and --api-key) or set OPENAI_BASE_URL / OPENAI_API_KEY."
        ) from exc
    return BuiltinPolicy()


def _eval_row(traj: Trajectory, version: int) -> dict[str, Any] | None:
    for e in reversed(traj.events):
        if isinstance(e, EvaluationEvent) and e.version == version:
            return e.result
    return None


def report(result: Any, out: Path) -> str:
    b = result.best
    lines = [
        f"run finished: {result.reason} after {result.turns} turn(s); "
        f"{result.totals.tokens:,} tokens, ${result.totals.cost_usd:.4f}"
    ]
    if b is None:
        lines.append("no verified candidate (nothing passed the correctness checks)")
    else:
        lines.append(f"best verified candidate: workspace version {b.version} (turn {b.turn}), reward {b.reward}")
        res = _eval_row(result.trajectory, b.version) or {}
        timing = res.get("timing") or {}

        def ms(key: str) -> str:
            s = timing.get(key)
            return f"{s['median_ms']:.4f} ms" if s else "n/a"

        def x(v: float | None) -> str:
            return f"{v:.3f}x" if v is not None else "n/a"

        lines.append(f"  candidate {ms('candidate')}  eager {ms('eager')}  torch.compile {ms('compile')}")
        lines.append(
            f"  speedup vs eager {x(b.speedup_vs_eager)}, vs torch.compile {x(b.speedup_vs_compile)}"
            f"  ({res.get('device') or 'device n/a'}, {res.get('backend') or ''})"
        )
        lines.append(f"  files: {out / 'best'}")
    lines.append(f"trajectory: {out / 'trajectory.json'}")
    return "\n".join(lines)


class UsageError(Exception):
    """The command line cannot make a task; the message says what was expected."""


def task_source(args: argparse.Namespace) -> tuple[str, str]:
    """(task source, task name) from FILE and --class/--init/--inputs, by the same functions as
    the web form: a .pt2 ExportedProgram, a chosen nn.Module class, or a KernelBench task."""
    from agent.exported_task import exported_task_source, looks_exported
    from agent.module_task import SpecError, find_module_classes, task_from_module

    path = Path(args.task)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".pt2" or looks_exported(data):
            if args.module_class or args.inputs or args.init is not None:
                raise UsageError("a .pt2 file brings its module and example inputs: drop --class, --init and --inputs")
            return exported_task_source(data, path.stem), path.stem
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{path} is neither UTF-8 Python source nor a .pt2 file") from None
        if args.module_class:
            if not args.inputs:
                raise UsageError(
                    f"--class {args.module_class} needs --inputs: one spec per input of forward(), e.g. --inputs 'float32[32,64]'"
                )
            return task_from_module(source, args.module_class, args.init, args.inputs), args.module_class
        if args.inputs or args.init is not None:
            raise UsageError("--init and --inputs describe the class given with --class NAME")
        if not ("class Model" in source and "def get_inputs" in source):
            try:
                names = [c.name for c in find_module_classes(source)]
            except SyntaxError as exc:
                raise UsageError(f"{path}: syntax error on line {exc.lineno}: {exc.msg}") from None
            hint = (
                f"it defines nn.Module classes {', '.join(names)}: pick one with --class NAME --inputs SPEC"
                if names
                else "and it defines no nn.Module class"
            )
            raise UsageError(f"{path} is not a KernelBench task (class Model, get_inputs(), get_init_inputs()); {hint}")
        return source, path.stem
    except SpecError as exc:
        raise UsageError(f"{path}: {exc}") from None


def cmd_optimize(args: argparse.Namespace) -> int:
    from agent.evaluator import LocalEvaluator
    from agent.loop import Budgets, run, task_from_trajectory
    from agent.task import is_task, task_from_source

    traj = None
    if args.resume:
        traj = Trajectory.load(args.resume)
        task = task_from_trajectory(traj)
        if args.task:
            try:
                source, name = task_source(args)
            except UsageError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            if not is_task(task.task_hash, source):
                print("error: TASK differs from the task recorded in the trajectory", file=sys.stderr)
                return EXIT_USAGE
    elif args.task:
        options: dict[str, Any] = {"torch_ops": args.torch_ops, "preset": args.preset, "precision": args.precision}
        if args.no_compile_baseline:
            options["compile_baseline"] = False
        for item in args.eval_option:
            key, sep, value = item.partition("=")
            if not sep:
                print(f"error: --eval-option needs KEY=VALUE, got {item!r}", file=sys.stderr)
                return EXIT_USAGE
            try:
                options[key.strip()] = json.loads(value)
            except json.JSONDecodeError:
                options[key.strip()] = value
        try:
            source, name = task_source(args)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        task = task_from_source(source, name, args.backend, options)
    else:
        print("error: give TASK.py (or FILE.py --class NAME, or MODEL.pt2) or --resume TRAJ", file=sys.stderr)
        return EXIT_USAGE

    out = Path(args.out or f"runs/{task.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    policy = make_policy(args)
    budgets = Budgets(
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        max_wall_time_s=args.max_wall_time,
        max_cost_usd=args.max_cost,
        confirmations=args.confirmations,
    )
    progress = Progress(budgets.max_turns)
    stop = {"requested": False}

    def on_sigint(signum: int, frame: Any) -> None:
        if stop["requested"]:
            raise KeyboardInterrupt
        stop["requested"] = True
        progress.write("stop requested: finishing this turn (Ctrl-C again to abort)")

    previous = signal.signal(signal.SIGINT, on_sigint)
    print(
        f"optimising {task.name} on {task.backend} with {getattr(policy, 'describe', lambda: policy.name)()}; "
        f"output in {out}",
        file=sys.stderr,
    )
    try:
        result = run(
            task,
            policy,
            LocalEvaluator(),
            budgets,
            on_event=progress.on_event,
            stop_requested=lambda: stop["requested"],
            trajectory=traj,
            on_progress=progress.on_progress,
            journal=str(out / "trajectory.jsonl"),
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    result.trajectory.save(out / "trajectory.json")
    if result.best is not None:
        best_dir = out / "best"
        for rel, text in result.best.files.items():
            dest = best_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
    print(report(result, out))
    if result.reason == "error":
        fin = result.trajectory.finished()
        print(f"error: {fin.summary if fin else 'the run failed'}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if result.verified else EXIT_NO_CANDIDATE


def cmd_show(args: argparse.Namespace) -> int:
    traj = Trajectory.load(args.trajectory)
    task, fin, best, totals = traj.task(), traj.finished(), traj.best(), traj.totals()
    print(
        f"task: {task.name if task else '?'} ({task.backend if task else '?'}), {len(traj)} events, {traj.turns()} turns"
    )
    print(f"tokens: {totals.tokens:,} (prompt {totals.prompt_tokens:,}), cost ${totals.cost_usd:.4f}")
    print("rewards per turn: " + (", ".join(f"{t}:{r}" for t, r in sorted(traj.rewards_per_turn().items())) or "none"))
    if best:
        print(
            f"best: version {best.version}, reward {best.reward}, speedup vs eager {best.speedup_vs_eager}, "
            f"vs torch.compile {best.speedup_vs_compile}; files: {', '.join(sorted(best.files))}"
        )
    print(f"finished: {fin.reason if fin else 'no (interrupted; resumable)'}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agent", description="Kernelwright agent: optimise a PyTorch task with custom kernels."
    )
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("optimize", help="run the agent on a task: KernelBench format, any nn.Module class, or a .pt2")
    o.add_argument(
        "task",
        nargs="?",
        help="a KernelBench task (Model, get_inputs, get_init_inputs), any .py file with --class, or a .pt2",
    )
    o.add_argument(
        "--class",
        dest="module_class",
        default=None,
        metavar="NAME",
        help="the nn.Module subclass of FILE to optimise (FILE need not be a KernelBench task)",
    )
    o.add_argument(
        "--init",
        default=None,
        metavar="JSON",
        help="--class's constructor arguments as JSON: a list (positional) or an object (keywords), e.g. '[64, 256]'",
    )
    o.add_argument(
        "--inputs",
        action="extend",
        nargs="+",
        default=[],
        metavar="SPEC",
        help="one spec per input of forward(): DTYPE[DIMS] [DISTRIBUTION], e.g. 'float32[32,64]' 'int64[8,128] randint(0,50257)'",
    )
    o.add_argument("--backend", choices=BACKENDS, default="auto")
    o.add_argument("--model", default=None, help="model name (default: OPENAI_MODEL or " + DEFAULT_MODEL + ")")
    o.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    o.add_argument("--api-key", default=None, help="API key (default: OPENAI_API_KEY)")
    o.add_argument(
        "--policy",
        choices=("auto", "openai", "builtin"),
        default="auto",
        help="auto: the model when an endpoint is configured, else the built-in policy",
    )
    o.add_argument("--tool-mode", choices=("auto", "native", "text"), default="auto")
    o.add_argument("--temperature", type=float, default=0.2)
    o.add_argument("--max-completion-tokens", type=int, default=8192)
    o.add_argument("--context-window", type=int, default=None)
    o.add_argument("--retries", type=int, default=6, help="retries on 429, 5xx and timeouts (exponential backoff)")
    o.add_argument("--max-turns", type=int, default=30, help="1..200 (default 30)")
    o.add_argument(
        "--confirmations",
        type=int,
        default=2,
        help="evaluations of the best candidate after the last turn; the median one is the result (default 2)",
    )
    o.add_argument("--max-tokens", type=int, default=None, help="stop after this many prompt+completion tokens")
    o.add_argument("--max-wall-time", type=float, default=None, help="seconds")
    o.add_argument("--max-cost", type=float, default=None, help="USD")
    o.add_argument("--torch-ops", choices=TORCH_OPS, default="forbid")
    o.add_argument("--preset", choices=list(PRESETS), default="default")
    o.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="task",
        help="cast floating parameters, buffers and inputs (task: keep the task's dtypes)",
    )
    o.add_argument("--no-compile-baseline", action="store_true", help="skip timing torch.compile (faster on CPU)")
    o.add_argument(
        "--eval-option",
        "-O",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any sandbox EvalOptions field, e.g. -O timing_budget_s=0.2 -O correctness_trials=2",
    )
    o.add_argument("--out", default=None, help="output folder (default runs/TASK-TIMESTAMP)")
    o.add_argument("--resume", default=None, help="continue a run from its trajectory.json or trajectory.jsonl")
    o.set_defaults(func=cmd_optimize)
    s = sub.add_parser("show", help="summarise a trajectory file")
    s.add_argument("trajectory")
    s.set_defaults(func=cmd_show)
    from agent.export import add_parser as add_export_parser

    add_export_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("aborted; resume with --resume OUT/trajectory.jsonl", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
