"""`python -m sandbox evaluate|baseline|profile|compile|bench`.

Exit status 0 whenever an evaluation ran (whatever its verdict), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .options import BACKENDS, PRESETS, TORCH_OPS, EvalOptions
from .schema import EvalResult


def _options(args: argparse.Namespace) -> EvalOptions:
    kw = {"backend": args.backend, "preset": args.preset}
    if getattr(args, "torch_ops", None):
        kw["torch_ops"] = args.torch_ops
    if getattr(args, "no_compile_baseline", False):
        kw["compile_baseline"] = False
    if getattr(args, "cache_dir", None):
        kw["cache_dir"] = args.cache_dir
    if getattr(args, "trials", None):
        kw["correctness_trials"] = args.trials
    if getattr(args, "budget", None):
        kw["timing_budget_s"] = args.budget
    if getattr(args, "timing_cpu", None) is not None:
        kw["timing_cpu"] = args.timing_cpu
    return EvalOptions(**kw)


def _print(res: EvalResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(res.to_dict(), indent=1))
        return
    print(f"status: {res.status.value}   verdict: {res.verdict.value}   reward: {res.reward}")
    for r in res.reasons:
        print(f"  - {r}")
    for t in res.trials:
        print(
            f"  trial {t.index + 1} [{t.kind}] {'pass' if t.passed else 'FAIL'} max_abs={t.max_abs_error} {t.message}"
        )
    tm = res.timing
    for name, s in (("candidate", tm.candidate), ("eager", tm.eager), ("torch.compile", tm.compile)):
        if s:
            cpu = f"  cpu {s.cpu}" if s.cpu is not None else ""
            print(
                f"  {name:14s} median {s.median_ms:.4f} ms  min {s.min_ms:.4f}  max {s.max_ms:.4f}  spread {s.spread:.3f}  n={s.trials}{cpu}"
            )
    if res.audit.torch_compute_ops:
        print(f"  torch compute ops: {', '.join(res.audit.torch_compute_ops)}")
    for row in res.profile[:15]:
        print(f"  {row.share * 100:5.1f}%  {row.total_ms:9.3f} ms  x{row.calls:<5d} {row.name}")
    if res.roofline:
        roof = res.roofline
        print(
            f"  roofline: {roof.flops:.3g} FLOP, {roof.min_bytes:.3g} B, floor {roof.floor_ms:.4g} ms ({roof.bound}-bound), "
            f"fraction of speed of light {roof.fraction_of_sol}"
        )
        if roof.note:
            print(f"  roofline note: {roof.note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", choices=BACKENDS, default="auto")
        p.add_argument("--preset", choices=list(PRESETS), default="default")
        p.add_argument("--no-compile-baseline", action="store_true", help="skip the torch.compile baseline")
        p.add_argument("--cache-dir")
        p.add_argument("--budget", type=float, help="timing budget per callable in seconds")
        p.add_argument(
            "--timing-cpu", type=int, help="pin every timed loop to this CPU (default: $KERNELWRIGHT_TIMING_CPU)"
        )
        p.add_argument("--json", action="store_true")

    for name in ("evaluate", "profile"):
        p = sub.add_parser(name)
        p.add_argument("--reference", required=True)
        p.add_argument("--candidate", required=True)
        p.add_argument("--torch-ops", choices=TORCH_OPS, default="forbid")
        p.add_argument("--trials", type=int)
        common(p)
    p = sub.add_parser("baseline")
    p.add_argument("reference")
    common(p)
    p = sub.add_parser("compile")
    p.add_argument("--candidate", required=True)
    common(p)
    sub.add_parser("bench", add_help=False)
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bench":
        from benchmarks.sandbox_bench import main as bench_main  # the bench lives with the others

        return bench_main(argv[1:])
    args = parser.parse_args(argv)
    # one evaluation per command: children started ahead for a next one would only be killed at exit
    os.environ.setdefault("KERNELWRIGHT_SPARES", "0")

    from . import baseline, compile_candidate, evaluate, load_candidate, profile_candidate

    try:
        options = _options(args)
        if args.command == "compile":
            cres = compile_candidate(load_candidate(args.candidate), options)
            print(json.dumps(cres.to_dict(), indent=1) if args.json else (cres.log or ("ok" if cres.ok else "failed")))
            return 0
        ref_path = Path(args.reference)
        task_source = ref_path.read_text()
        if args.command == "baseline":
            res = baseline(task_source, options)
        else:
            files = load_candidate(args.candidate)
            fn = profile_candidate if args.command == "profile" else evaluate
            progress = None if args.json else (lambda step, d: print(f"[{step}] {d if d else ''}", file=sys.stderr))
            res = fn(task_source, files, options, progress)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print(res, args.json)
    return 0
