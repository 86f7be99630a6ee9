"""Run the built-in policy over the task suite and print the paper's table.

    python -m benchmarks.suite [--backend cpu|cuda] [--tasks NAME ...] [--out results.json]

Columns (CUDA Agent paper, arXiv:2602.24286): share of tasks with a correct candidate, share
faster than eager (reward >= 2: more than 5% faster), share faster than torch.compile (reward 3),
geometric-mean speedup against each (over all tasks; a task without a correct candidate counts
as 1.0x: the user keeps the reference), and the median fraction of speed of light.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent.builtin import BuiltinPolicy
from benchmarks.runner import TaskOutcome, environment, geomean, median, run_parallel, run_task, task_paths


def summarise(rows: list[TaskOutcome]) -> dict[str, Any]:
    n = len(rows) or 1
    return {
        "tasks": len(rows),
        "share_correct": sum(r.correct for r in rows) / n,
        "share_faster_than_eager": sum((r.reward or 0) >= 2 for r in rows) / n,
        "share_faster_than_compile": sum((r.reward or 0) >= 3 for r in rows) / n,
        "geomean_speedup_vs_eager": geomean([(r.speedup_vs_eager if r.correct else 1.0) or 1.0 for r in rows]),
        "geomean_speedup_vs_compile": geomean(
            [
                r.speedup_vs_compile if r.correct else 1.0
                for r in rows
                if r.speedup_vs_compile is not None or not r.correct
            ]
        ),
        "geomean_speedup_vs_eager_correct_only": geomean([r.speedup_vs_eager for r in rows if r.correct]),
        "median_fraction_of_sol": median([r.fraction_of_sol for r in rows if r.correct]),
    }


def _f(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1%}" if pct else f"{v:.2f}x"


def format_table(rows: list[TaskOutcome], summary: dict[str, Any], env: dict[str, Any]) -> str:
    lines = [
        f"Built-in policy on {summary['tasks']} tasks — {env['device']} ({env['backend']}), torch {env['torch']}, "
        f"{env['date']}",
        "",
        f"| {'task':<28} | correct | reward | vs eager | vs compile | cand ms | % SOL |",
        f"| {'-' * 28} | ------- | ------ | -------- | ---------- | ------- | ----- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.name:<28} | {'yes' if r.correct else 'NO':<7} | {r.reward if r.reward is not None else '-':>6} | "
            f"{_f(r.speedup_vs_eager):>8} | {_f(r.speedup_vs_compile):>10} | "
            f"{'n/a' if r.candidate_ms is None else f'{r.candidate_ms:.4g}':>7} | {_f(r.fraction_of_sol, True):>5} |"
        )
    s = summary
    lines += [
        "",
        "| metric | value |",
        "| --- | --- |",
        f"| correct | {_f(s['share_correct'], True)} |",
        f"| faster than eager (>5%) | {_f(s['share_faster_than_eager'], True)} |",
        f"| faster than torch.compile (>5%) | {_f(s['share_faster_than_compile'], True)} |",
        f"| geomean speedup vs eager | {_f(s['geomean_speedup_vs_eager'])} |",
        f"| geomean speedup vs torch.compile | {_f(s['geomean_speedup_vs_compile'])} |",
        f"| median fraction of speed of light | {_f(s['median_fraction_of_sol'], True)} |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the built-in policy over the task suite.")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--tasks", nargs="*", help="task names (globs allowed) or paths; default: all")
    ap.add_argument("--out", help="write per-task rows and the summary as JSON")
    ap.add_argument(
        "--shrink",
        type=int,
        default=0,
        help="divide the tasks' size constants by this factor (default: 16 on cpu, 1 on cuda)",
    )
    ap.add_argument("--max-variants", type=int, default=3, help="launch configurations tried per task")
    ap.add_argument("--max-turns", type=int, default=30)
    ap.add_argument("--no-profile", action="store_true", help="skip the profile of the best candidate")
    ap.add_argument("--no-compile-baseline", action="store_true", help="do not time torch.compile")
    ap.add_argument("--preset", default="default")
    ap.add_argument(
        "--jobs", type=int, default=1, help="tasks run side by side (timed loops still take the device one at a time)"
    )
    args = ap.parse_args(argv)
    shrink = args.shrink or (16 if args.backend == "cpu" else 1)
    options: dict[str, Any] = {"preset": args.preset}
    if args.no_compile_baseline:
        options["compile_baseline"] = False
    env = environment(args.backend)
    rows: list[TaskOutcome] = []
    work = [
        (path, args.backend, options, not args.no_profile, args.max_variants, args.max_turns, shrink)
        for path in task_paths(args.tasks)
    ]
    for out in run_parallel(_one, work, args.jobs):
        rows.append(out)
        print(
            f"{out.name:<28} correct={out.correct} reward={out.reward} vs_eager={_f(out.speedup_vs_eager)} "
            f"vs_compile={_f(out.speedup_vs_compile)} ({out.turns} turns, {out.seconds:.0f} s)",
            flush=True,
        )
        if args.out:  # keep partial results if a long run is interrupted
            _write(args.out, rows, env, shrink)
    rows.sort(key=lambda r: r.name)
    summary = summarise(rows)
    print()
    print(format_table(rows, summary, env))
    if args.out:
        _write(args.out, rows, env, shrink)
    return 0


def _one(
    path: Path, backend: str, options: dict[str, Any], profile: bool, max_variants: int, max_turns: int, shrink: int
) -> TaskOutcome:
    pol = BuiltinPolicy(profile_best=profile, max_variants=max_variants)
    return run_task(path, backend, options, pol, max_turns, shrink)[0]


def _write(path: str, rows: list[TaskOutcome], env: dict[str, Any], shrink: int) -> None:
    Path(path).write_text(
        json.dumps(
            {
                "environment": {**env, "shrink": shrink},
                "summary": summarise(rows),
                "tasks": [r.to_dict() for r in rows],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
