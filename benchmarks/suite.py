"""Run a policy over the task suite, or over KernelBench, and print the paper's table.

    python -m benchmarks.suite [--backend cpu|cuda] [--tasks NAME ...] [--out results.json]
    python -m benchmarks.suite --kernelbench DIR --level 1 2 3 [--sample N --seed S [--stratified]]
                               [--base-url URL --model NAME] [--backend cuda] [--out results.json]

--kernelbench reads a local KernelBench checkout (the folder holding level1..level3; the user's own
clone, never committed here), sizes shrunk on the CPU (benchmarks.kernelbench.shrink_ints, --cap),
and prints the table per level. The policy is the built-in one, or with --base-url/--model
(or OPENAI_BASE_URL) a model behind any OpenAI-compatible endpoint. fast_p (KernelBench's metric):
the share of tasks that are correct and more than p times as fast as eager.

Columns (CUDA Agent paper, arXiv:2602.24286): share of tasks with a correct candidate, share
faster than eager (reward >= 2: more than 5% faster), share faster than torch.compile (reward 3),
geometric-mean speedup against each (over all tasks; a task without a correct candidate counts
as 1.0x: the user keeps the reference), and the median fraction of speed of light.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from agent.builtin import BuiltinPolicy
from agent.policy import Policy
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
        **{f"fast_{p}": fast_p(rows, p) for p in FAST_P},
    }


FAST_P = (1.0, 1.5)


def fast_p(rows: list[TaskOutcome], p: float) -> float:
    """KernelBench's fast_p: the share of all tasks that are correct and more than p times as fast as eager."""
    return sum(bool(r.correct) and (r.speedup_vs_eager or 0.0) > p for r in rows) / (len(rows) or 1)


LEVEL_METRICS = (
    ("tasks", "tasks", None),
    ("correct", "share_correct", True),
    ("faster than eager (>5%)", "share_faster_than_eager", True),
    ("faster than torch.compile (>5%)", "share_faster_than_compile", True),
    ("geomean vs eager", "geomean_speedup_vs_eager", False),
    ("geomean vs torch.compile", "geomean_speedup_vs_compile", False),
    *((f"fast_{p}", f"fast_{p}", True) for p in FAST_P),
    ("median fraction of speed of light", "median_fraction_of_sol", True),
)


def level_table(rows: list[TaskOutcome]) -> str:
    """The paper's table with one column per level (a task's level: its extra["level"]) and one for all."""
    levels = sorted({str(r.extra.get("level", "?")) for r in rows})
    cols = {lvl: summarise([r for r in rows if str(r.extra.get("level", "?")) == lvl]) for lvl in levels}
    if len(levels) > 1:
        cols["all"] = summarise(rows)
    lines = ["| metric | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
    for label, key, pct in LEVEL_METRICS:
        cells = [str(c[key]) if pct is None else _f(c[key], pct) for c in cols.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
        *(f"| fast_{p} | {_f(s[f'fast_{p}'], True)} |" for p in FAST_P),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run a policy over the task suite or over KernelBench.")
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
    kb = ap.add_argument_group("KernelBench")
    kb.add_argument("--kernelbench", type=Path, help="a local KernelBench checkout (the folder holding level1..3)")
    kb.add_argument("--level", type=int, nargs="*", default=[1, 2, 3])
    kb.add_argument("--problems", nargs="*", default=[], help="LEVEL/NUMBER, e.g. 1/23 2/11")
    kb.add_argument("--sample", type=int, default=0, help="problems drawn per level (0: every problem)")
    kb.add_argument("--seed", type=int, default=0)
    kb.add_argument("--torch-ops", choices=("allow", "forbid"), default="allow", help="the tasks' torch-ops policy")
    kb.add_argument("--stratified", action="store_true", help="--sample draws each problem family's share")
    kb.add_argument(
        "--cap", type=int, help="sizes shrunk so that the largest is at most this (default: cpu 32, cuda 0: as written)"
    )
    model = ap.add_argument_group("policy (default: the built-in one)")
    model.add_argument("--base-url", help="an OpenAI-compatible endpoint (or OPENAI_BASE_URL): a model is the policy")
    model.add_argument("--model", help="the model's name (or OPENAI_MODEL)")
    model.add_argument("--api-key", help="(or OPENAI_API_KEY)")
    args = ap.parse_args(argv)
    shrink = args.shrink or (16 if args.backend == "cpu" else 1)
    options: dict[str, Any] = {"preset": args.preset}
    if args.no_compile_baseline:
        options["compile_baseline"] = False
    env = environment(args.backend)
    spec = {
        "model": bool(args.base_url or args.model or os.environ.get("OPENAI_BASE_URL")),
        "base_url": args.base_url,
        "model_name": args.model,
        "api_key": args.api_key,
        "profile": not args.no_profile,
        "max_variants": args.max_variants,
    }
    if args.kernelbench:
        options["torch_ops"] = args.torch_ops
    jobs = _kernelbench_jobs(args) if args.kernelbench else [{"path": p} for p in task_paths(args.tasks)]
    for j in jobs:
        j |= {
            "backend": args.backend,
            "options": options,
            "policy": spec,
            "max_turns": args.max_turns,
            "shrink": shrink,
        }
    rows: list[TaskOutcome] = []
    for out in run_parallel(_one, [(j,) for j in jobs], args.jobs):
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
    if args.kernelbench:
        print()
        print(level_table(rows))
    if args.out:
        _write(args.out, rows, env, shrink)
    return 0


def _kernelbench_jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The KernelBench problems asked for, each with its text (sizes shrunk by --cap) and level."""
    from benchmarks.kernelbench import kernelbench_paths, shrink_ints

    cap = args.cap if args.cap is not None else (32 if args.backend == "cpu" else 0)
    paths = kernelbench_paths(
        args.kernelbench,
        args.level,
        args.problems,
        args.sample,
        args.seed,
        every=not (args.problems or args.sample),
        stratified=args.stratified,
    )
    jobs = []
    for p in paths:
        level = p.parent.name.removeprefix("level")
        jobs.append(
            {"path": p, "source": shrink_ints(p.read_text(), cap), "name": f"L{level}/{p.stem}", "level": f"L{level}"}
        )
    return jobs


def _policy(spec: dict[str, Any]) -> Policy:
    if spec["model"]:
        from agent.openai_policy import OpenAIPolicy

        return OpenAIPolicy(base_url=spec["base_url"], api_key=spec["api_key"], model=spec["model_name"])
    return BuiltinPolicy(profile_best=spec["profile"], max_variants=spec["max_variants"])


def _one(job: dict[str, Any]) -> TaskOutcome:
    out = run_task(
        job["path"],
        job["backend"],
        job["options"],
        _policy(job["policy"]),
        job["max_turns"],
        job["shrink"],
        source=job.get("source"),
        name=job.get("name"),
    )[0]
    if job.get("level"):
        out.extra["level"] = job["level"]
    return out


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
