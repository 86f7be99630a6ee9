"""Run the built-in policy on the five case studies and store each trajectory as a fixture.

    python -m benchmarks.case_studies --backend cuda --out DIR
    python -m benchmarks.case_studies --backend cuda --out DIR --kernelbench KB --cases 3/13 3/8

With `--kernelbench` (a local KernelBench checkout's problem folder, never committed) the cases
are KernelBench problems named level/number, run at their published sizes; the fixture holds
none of KernelBench's text (benchmarks.kbfixture: each line of the problem is a token, put back
from a local checkout when the gallery loads it) and its meta names the file and its SHA-256.

Writes DIR/<case>.json (the trajectory: every event of every turn, with a "meta" block naming
the device, date and torch version; agent.trajectory.Trajectory.from_dict reads it) and
DIR/<case>.md (the measured numbers next to the write-up in docs/case-studies/<case>.md), and
DIR/summary.json. Runs on a GPU host that has only torch, numpy and pytest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from agent.builtin import BuiltinPolicy
from agent.events import ModelMessage
from benchmarks.kbfixture import redact, redact_text
from benchmarks.runner import TASKS_DIR, TaskOutcome, environment, run_parallel, run_task, shrink_source

CASES = ["basic_residual_block", "diag_scale_matmul", "gemm_divide_sum_scale", "rmsnorm_swish", "linear_gelu_residual"]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "case-studies"


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the built-in policy on the five case studies.")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--out", required=True, help="folder for the trajectory fixtures")
    ap.add_argument("--cases", nargs="*", default=None, help="our tasks by name, or with --kernelbench: 3/13 ...")
    ap.add_argument("--kernelbench", type=Path, help="KernelBench's problem folder (holding level1 ... level3)")
    ap.add_argument("--shrink", type=int, default=1, help="divide size constants (for a quick CPU dry run)")
    ap.add_argument("--max-turns", type=int, default=30)
    ap.add_argument("--preset", default="default", help="sandbox tolerance preset (default, kernelbench, cuda-agent)")
    ap.add_argument(
        "--torch-ops",
        choices=("allow", "forbid"),
        help="the sandbox's rule on torch operators; default forbid for our cases, allow for KernelBench's "
        "(as benchmarks.kernelbench runs them)",
    )
    ap.add_argument(
        "--jobs", type=int, default=1, help="cases run side by side (timed loops still take the device one at a time)"
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(args.backend)
    rows: list[dict[str, Any]] = []
    paths = case_paths(args.kernelbench, args.cases)
    torch_ops = args.torch_ops or ("allow" if args.kernelbench is not None else "forbid")
    work = [(path, args.backend, args.preset, torch_ops, args.max_turns, args.shrink) for path in paths.values()]
    for outcome, data, final in run_parallel(_one, work, args.jobs):
        case = outcome.name
        path = paths[case]
        data["meta"] = {
            **env,
            "case": case,
            "policy": "builtin",
            "shrink": args.shrink,
            "preset": args.preset,
            "torch_ops": torch_ops,
            "task_source": shrink_source(path.read_text(), args.shrink),
        }
        if args.kernelbench is not None:  # none of KernelBench's text in the fixture (benchmarks.kbfixture)
            source = data["meta"]["task_source"]
            file, sha = str(path.relative_to(args.kernelbench)), hashlib.sha256(path.read_bytes()).hexdigest()
            data, final = redact(data, source, file, sha, args.shrink), redact_text(final, source)
        (out / f"{case}.json").write_text(json.dumps(data, indent=1))
        md = [
            f"# {case}: measured run",
            "",
            f"{env['device']} ({env['backend']}), torch {env['torch']}, {env['date']}",
            "",
            f"- correct: {outcome.correct}, reward {outcome.reward}",
            f"- candidate {outcome.candidate_ms} ms, eager {outcome.eager_ms} ms, torch.compile {outcome.compile_ms} ms",
            f"- speedup {_f(outcome.speedup_vs_eager)} vs eager, {_f(outcome.speedup_vs_compile)} vs torch.compile",
            f"- {outcome.turns} turns, {outcome.evaluations} evaluations, {outcome.seconds:.0f} s",
            "",
            f"Write-up: docs/case-studies/{case}.md",
            "",
            "## Final message",
            "",
            "```",
            final,
            "```",
        ]
        (out / f"{case}.md").write_text("\n".join(md) + "\n")
        rows.append(outcome.to_dict())
        print(
            f"{case:<24} correct={outcome.correct} reward={outcome.reward} vs_eager={_f(outcome.speedup_vs_eager)} "
            f"vs_compile={_f(outcome.speedup_vs_compile)} ({outcome.turns} turns, {outcome.seconds:.0f} s)",
            flush=True,
        )
    rows.sort(key=lambda r: r["name"])
    (out / "summary.json").write_text(json.dumps({"environment": env, "cases": rows}, indent=1))
    return 0


def case_paths(kernelbench: Path | None, cases: list[str] | None) -> dict[str, Path]:
    """Case name -> its task file: our five by default, or KernelBench problems by level/number
    (named kb<level>_<file stem>, as the gallery keys them)."""
    if kernelbench is None:
        return {case: TASKS_DIR / f"{case}.py" for case in cases or CASES}
    if not cases:
        raise SystemExit("--kernelbench needs --cases level/number ... (for example 3/13 3/8)")
    from benchmarks.kernelbench import kernelbench_paths

    return {case_name(path): path for path in kernelbench_paths(kernelbench, [], cases, 0, 0)}


def case_name(path: Path) -> str:
    return path.stem if path.parent == TASKS_DIR else f"kb{path.parent.name.removeprefix('level')}_{path.stem}"


def _one(
    path: Path, backend: str, preset: str, torch_ops: str, max_turns: int, shrink: int
) -> tuple[TaskOutcome, dict[str, Any], str]:
    """One case in a worker process: the outcome, the trajectory as a dict, the final message."""
    source = shrink_source(path.read_text(), shrink)
    options = {"preset": preset, "torch_ops": torch_ops}
    outcome, res = run_task(path, backend, options, BuiltinPolicy(), max_turns, source=source, name=case_name(path))
    messages = [e.content for e in res.trajectory.of_type(ModelMessage)]
    return outcome, res.trajectory.to_dict(), messages[-1] if messages else ""


if __name__ == "__main__":
    sys.exit(main())
