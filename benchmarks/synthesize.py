"""Synthesise KernelBench-format tasks for training kernel agents, and keep the good ones.

    python -m benchmarks.synthesize --count N --backend cpu|cuda --out DIR
                                    [--seed S] [--kernelbench .kernelbench/KernelBench]
                                    [--similarity 0.6] [--min-ms 0.02] [--max-ms 50] [--no-compile]

Composes N candidate tasks from operators mined from torch (and transformers when installed;
benchmarks.synth.ops), drops exact repeats and near-duplicates of KernelBench problems (the
Jaccard similarity of their operator multisets at least --similarity; benchmarks.synth.similarity),
then runs each (benchmarks.synth.checks): eager, finite, deterministic, input-dependent, eager
median within [--min-ms, --max-ms], and torch.compile agreeing with eager. Writes DIR/tasks/*.py
(the kept tasks), DIR/report.json (every candidate, kept or why dropped) and DIR/report.md.
Runs single-threaded (torch.set_num_threads(1)) unless --threads says otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.synth import checks
from benchmarks.synth.compose import Composer
from benchmarks.synth.ops import mine
from benchmarks.synth.similarity import KernelBenchIndex, ops_of

DEFAULT_KERNELBENCH = Path(__file__).resolve().parents[1] / ".kernelbench" / "KernelBench"


def screen(source: str, seen: set[tuple], index: KernelBenchIndex, threshold: float) -> tuple[str, str, dict[str, Any]]:
    """(check, reason, details) of the checks that need no execution; ("", "", details) passes."""
    ops = ops_of(source)
    near = index.nearest(ops)
    details = {"ops": dict(ops), "nearest_kernelbench": near.problem, "similarity": near.score}
    key = tuple(sorted(ops.items()))
    if key in seen:
        return "duplicate", "the same operators as an earlier candidate", details
    seen.add(key)
    if near.score >= threshold:
        return "kernelbench", f"near-duplicate of KernelBench {near.problem} (similarity {near.score:.2f})", details
    return "", "", details


def synthesize(args: argparse.Namespace, log=print) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    device = "cuda" if args.backend == "cuda" else "cpu"
    started = time.time()
    catalogue = mine()
    index = KernelBenchIndex(Path(args.kernelbench) / "KernelBench")
    composer = Composer(catalogue, random.Random(args.seed))
    out = Path(args.out)
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    rows, seen = [], set()
    for i in range(args.count):
        prog = composer.program()
        name, source = prog.name(i), prog.source()
        check, reason, details = screen(source, seen, index, args.similarity)
        verdict = checks.Verdict(check=check, reason=reason)
        if not check:
            verdict = checks.check(source, device, args.min_ms, args.max_ms, with_compile=not args.no_compile)
        if verdict.kept:
            (out / "tasks" / f"{name}.py").write_text(source, encoding="utf-8")
        rows.append(
            {
                "name": name,
                "steps": prog.steps,
                "layout": prog.layout,
                "kept": verdict.kept,
                "check": verdict.check,
                "reason": verdict.reason,
                "eager_ms": verdict.eager_ms,
                "compile_s": verdict.compile_s,
                **details,
            }
        )
        log(f"[{i + 1}/{args.count}] {name}: " + ("kept" if verdict.kept else f"dropped ({verdict.reason})"))
    report = {
        "schema": "kernelwright.synthesis/1",
        "seed": args.seed,
        "backend": args.backend,
        "count": args.count,
        "kept": sum(r["kept"] for r in rows),
        "dropped_by": dict(Counter(r["check"] for r in rows if not r["kept"])),
        "seconds": round(time.time() - started, 1),
        "torch": torch.__version__,
        "similarity_threshold": args.similarity,
        "runtime_range_ms": [args.min_ms, args.max_ms],
        "compile_checked": not args.no_compile,
        "operators": catalogue.sizes(),
        "operator_sources": catalogue.sources,
        "kernelbench_problems": len(index.problems),
        "candidates": rows,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Task synthesis: {report['kept']} of {report['count']} kept ({report['backend']}, seed {report['seed']}, "
        f"{report['seconds']:.0f} s, torch {report['torch']})",
        "",
        f"Operators mined: {report['operators']}; compared with {report['kernelbench_problems']} KernelBench problems "
        f"(op-multiset Jaccard >= {report['similarity_threshold']} drops).",
        "",
        "| dropped by | candidates |",
        "| --- | --- |",
    ]
    lines += [f"| {check} | {n} |" for check, n in sorted(report["dropped_by"].items(), key=lambda kv: -kv[1])]
    lines += [
        "",
        "| candidate | kept | reason | eager ms | nearest KernelBench (similarity) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in report["candidates"]:
        lines.append(
            f"| {r['name']} | {'yes' if r['kept'] else 'no'} | {r['reason']} | {r['eager_ms'] if r['eager_ms'] is not None else ''} "
            f"| {r['nearest_kernelbench']} ({r['similarity']}) |"
        )
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.synthesize", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, required=True, help="candidate tasks to compose")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", required=True, help="output folder: tasks/*.py, report.json, report.md")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--kernelbench", default=str(DEFAULT_KERNELBENCH), help="a KernelBench checkout (its KernelBench/level*/)"
    )
    p.add_argument(
        "--similarity", type=float, default=0.6, help="drop candidates this similar to a KernelBench problem"
    )
    p.add_argument("--min-ms", type=float, default=0.02, help="drop candidates whose eager median is below this")
    p.add_argument("--max-ms", type=float, default=50.0, help="drop candidates whose eager median is above this")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: polite on a shared host)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile check (fast, for trying settings)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.count < 1:
        print("error: --count must be at least 1", file=sys.stderr)
        return 2
    try:
        report = synthesize(args, log=lambda line: print(line, file=sys.stderr))
    except FileNotFoundError as exc:
        print(f"error: {exc}; pass --kernelbench DIR (a clone of KernelBench)", file=sys.stderr)
        return 2
    print(
        f"kept {report['kept']} of {report['count']} in {args.out}/tasks; dropped by {report['dropped_by']}; "
        f"report: {args.out}/report.md"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
