"""The built-in policy on modules nobody here wrote: KernelBench problems and real model blocks.

    python -m benchmarks.kernelbench --kernelbench .kernelbench/KernelBench --problems 1/23 2/11 3/8
    python -m benchmarks.kernelbench --kernelbench DIR --level 1 2 3 --sample 4 --seed 0
    python -m benchmarks.kernelbench --blocks                    # benchmarks/blocks/*.py
    python -m benchmarks.kernelbench ... --out results.json --cap 32 --torch-ops allow

A KernelBench checkout is the user's own clone (never committed here). Problems are written
for a large GPU; on the CPU their module-level size constants are shrunk (`shrink_ints`: every
int >= 64 divided by one power of two, so that the largest is at most --cap, never below 8;
smaller ints such as kernel sizes and strides stay), which keeps divisibility between sizes.

    python -m benchmarks.kernelbench --kernelbench DIR --level 1 2 3 --coverage --shard 0/2 --out c0.json

--coverage (issue 18, point 5: no GPU needed) runs every problem of the levels on the CPU backend,
each stopped at its first correct candidate (BuiltinPolicy(first_correct=True), few timed calls:
coverage, not speed), and prints per level: problems, ran, captured, a generated candidate correct
(and of those, how many need no ATen island, i.e. what torch-ops=forbid would accept as far as the
plan goes), any correct candidate (the reference's own computation included), and the first
failures of the rest counted by class. A problem whose first sizes fail (the reference raises or
times out, or the candidate is incorrect) is shrunk once more with every int >= 16 divided and
batch_size apart, and the table lists those with their first failure.

Per task it records whether the forward was captured (and how: torch.export, torch.fx, or not
at all), whether a correct candidate was found, how many evaluations ran, the speedup against
eager, and which parts of the graph stayed library/ATen calls. CPU numbers are indicative only.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from agent.builtin import BuiltinPolicy
from agent.builtin.convsearch import TAG as SEARCH_TAG
from agent.builtin.cudagraph import TAG as GRAPH_TAG
from agent.evaluator import LocalEvaluator
from agent.events import CompileEvent, ErrorEvent, EvaluationEvent, Event, ToolCall, ToolResult
from agent.loop import Budgets, run
from agent.task import task_from_source
from benchmarks.runner import environment, geomean
from sandbox import devmem

BLOCKS_DIR = Path(__file__).resolve().parent / "blocks"
FALLBACK_LABEL = "The reference's own computation"


def shrink_ints(source: str, cap: int = 32, floor: int = 64, batch_apart: bool = False) -> str:
    """The module-level int constants (>= floor; plain ints, products like `2048 * 2`, and ints in
    tuples and lists) divided by the smallest power of two that brings the largest to at most `cap`. With
    `batch_apart`, `batch_size` (often far the largest: 32768 next to 64 groups) goes to 8 on its
    own and the factor is the one the other sizes need, so that the small ones keep their ratios."""
    if cap <= 0:
        return source
    tree = ast.parse(source)
    spans: list[tuple[int, int, int, int, int]] = []  # (line, col, end_line, end_col, value)
    batch: set[tuple[int, int]] = set()  # (line, col) of batch_size's value

    def const_int(node: ast.AST) -> int | None:
        try:
            v = (
                ast.literal_eval(node)
                if not isinstance(node, ast.BinOp)
                else eval(  # literals only
                    compile(ast.Expression(node), "<const>", "eval"), {"__builtins__": {}}
                )
            )
        except Exception:
            return None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def visit(value: ast.AST) -> None:
        if isinstance(value, ast.Tuple | ast.List):
            for e in value.elts:
                visit(e)
            return
        if isinstance(value, ast.BinOp) and not all(
            isinstance(x, ast.Constant) or isinstance(x, ast.BinOp) for x in (value.left, value.right)
        ):
            return
        v = const_int(value)
        if v is not None and v >= floor:
            spans.append((value.lineno, value.col_offset, value.end_lineno, value.end_col_offset, v))

    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            visit(node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if batch_apart and any(isinstance(t, ast.Name) and t.id == "batch_size" for t in targets):
                batch.add((node.value.lineno, node.value.col_offset))
    if not spans:
        return source
    rest = [s[4] for s in spans if (s[0], s[1]) not in batch]
    f = 1
    while max(rest or [0]) // f > cap:
        f *= 2
    lines = source.splitlines(keepends=True)
    for ln, c0, eln, c1, v in sorted(spans, reverse=True):
        if ln != eln:
            continue
        s = lines[ln - 1]
        lines[ln - 1] = s[:c0] + str(8 if (ln, c0) in batch else max(8, v // f)) + s[c1:]
    return "".join(lines)


def level_files(root: Path, lvl: int) -> list[Path]:
    """A level's problems in KernelBench's order (by number)."""
    return sorted((root / f"level{lvl}").glob("*.py"), key=lambda q: int(q.name.split("_")[0]))


def kernelbench_paths(
    root: Path,
    levels: list[int],
    problems: list[str],
    sample: int,
    seed: int,
    every: bool = False,
    stratified: bool = False,
) -> list[Path]:
    """The problems named, a sample per level, or (`every`) all problems of the levels."""
    if every:
        return [f for lvl in levels for f in level_files(root, lvl)]
    out: list[Path] = []
    for p in problems:  # "2/11" or "2/11_ConvTranspose2d..." or a path
        if Path(p).exists():
            out.append(Path(p))
            continue
        lvl, _, num = p.partition("/")
        hits = sorted((root / f"level{lvl}").glob(f"{num}_*.py")) or sorted((root / f"level{lvl}").glob(f"{num}*.py"))
        if not hits:
            raise SystemExit(f"no KernelBench problem {p!r} under {root}")
        out.append(hits[0])
    if sample:
        rng = random.Random(seed)
        for lvl in levels:
            files = level_files(root, lvl)
            out += stratified_sample(files, sample, rng) if stratified else rng.sample(files, min(sample, len(files)))
    return out


# a problem's family, from the words of its file name (first match wins): the strata of --stratified
_FAMILIES = (
    ("rnn", r"lstm|gru|rnn|mamba"),
    ("attention", r"attention|transformer|gptblock|vit|swin|scaleddotproduct"),
    ("transposed-conv", r"convtranspose|conv_transposed"),
    (
        "conv",
        r"conv|resnet|vgg|densenet|squeezenet|mobilenet|efficientnet|shufflenet|regnet|googlenet|alexnet|lenet|unet",
    ),
    ("gemm", r"matmul|gemm|bmm|matrix|mlp|netvlad"),
    ("norm", r"norm"),
    ("pool", r"pool"),
    ("loss", r"loss"),
    ("scan", r"cumsum|cumprod"),
    ("reduction", r"sum|mean|max|min(?!gpt)|argm|prod"),
)


def family_of(path: Path) -> str:
    """The family a problem belongs to (a stratum of --stratified): rnn, attention, conv, gemm, ...,
    else elementwise (level 1's activations)."""
    name = path.stem.lower()
    return next((f for f, pat in _FAMILIES if re.search(pat, name)), "elementwise")


def stratified_sample(files: list[Path], n: int, rng: random.Random) -> list[Path]:
    """n problems drawn so that each family holds its share of the level (largest remainder,
    every family with at least one problem when n allows), each family's drawn at random."""
    groups: dict[str, list[Path]] = {}
    for f in files:
        groups.setdefault(family_of(f), []).append(f)
    n = min(n, len(files))
    quota = {g: n * len(fs) / len(files) for g, fs in groups.items()}
    take = {g: min(len(groups[g]), max(1 if n >= len(groups) else 0, int(q))) for g, q in quota.items()}
    for g in sorted(quota, key=lambda g: quota[g] - int(quota[g]), reverse=True) * 2:
        if sum(take.values()) >= n:
            break
        if take[g] < len(groups[g]):
            take[g] += 1
    while sum(take.values()) > n:  # the floor of one per family overshot: trim the largest
        g = max(take, key=lambda g: take[g] - quota[g])
        take[g] -= 1
    picked = [f for g in sorted(groups) for f in rng.sample(groups[g], take[g])]
    return sorted(picked, key=lambda q: int(q.name.split("_")[0]))


def _level(path: Path) -> str:
    m = re.search(r"level(\d)", str(path))
    return f"L{m.group(1)}" if m else "block"


# first failures after which --coverage shrinks the problem again with every int >= 16 divided and
# batch_size apart: a size below 64 left as written can stop matching one that was shrunk
# (LayerNorm(out_channels) over a width that a transposed convolution doubled) or keep the problem
# too large for the CPU, and one factor for batch_size and the rest can leave a size at the floor of 8
# (64 groups of 4096 features: a group of one channel, whose output is constant)
_RESHRINK = (
    "the reference raises",
    "candidate timeout",
    "not captured: the analysis of the task did not finish",
    "candidate incorrect",
)


def run_one(
    path: Path,
    backend: str,
    options: dict[str, Any],
    cap: int,
    max_turns: int,
    max_variants: int,
    confirmations: int,
    coverage: bool = False,
    floor: int = 64,
    wall_s: float | None = None,
) -> dict[str, Any]:
    """One problem through the built-in policy; under `coverage`, once more with the sizes shrunk
    from 16 up when the first attempt's failure is one of _RESHRINK, and a third time with 4x the
    cap when the reference still raises (an image that five stride-2 stages shrink below 1 pixel).
    After `wall_s` seconds the policy takes no further turn and the best so far is the row."""
    row = _run_one(path, backend, options, cap, max_turns, max_variants, confirmations, coverage, floor, wall_s)
    if not (coverage and floor > 16 and _level(path) != "block"):
        return row
    first, secs = row["first_failure"], row["seconds"]
    for c in (cap, cap * 4):
        if not str(row["first_failure"]).startswith(_RESHRINK if c == cap else "the reference raises"):
            break
        row = _run_one(path, backend, options, c, max_turns, max_variants, confirmations, coverage, 16, wall_s)
        secs += row["seconds"]
        row |= {"seconds": secs, "first_attempt": first, "cap": c}
    return row


class _Steps:
    """One log line per sandbox step of an evaluation as it starts (waiting for device memory or
    the device, the reference, correctness, timing...): a shard that sits in one evaluation says
    in which step (six shards on one GPU sat in their first evaluation for minutes, 2026-12-07,
    and the log could not say where)."""

    def __init__(self, name: str, t0: float) -> None:
        self.name, self.t0, self.last = name, t0, ""

    def __call__(self, step: str, detail: dict[str, Any]) -> None:
        if step != self.last:
            self.last = step
            print(f"  {self.name} +{time.time() - self.t0:.0f} s sandbox: {step}", flush=True)


def _trace(name: str, t0: float, ev: Event) -> None:
    """One log line per step as it happens: a shard cut off by its timeout writes no row, and
    these lines say which problem, turn and step it was in and how long each took."""
    what = getattr(ev, "name", "") if isinstance(ev, (ToolCall, ToolResult)) else ""
    if isinstance(ev, EvaluationEvent):
        what = f"{ev.result.get('status', '')} {ev.purpose}".rstrip()
        reasons = ev.result.get("reasons") or []
        if ev.result.get("status") != "ok" and reasons:  # a rejected candidate's log says why
            what += f": {' '.join(str(reasons[0]).split())[:200]}"
    if isinstance(ev, CompileEvent):
        what = f"ok={ev.result.get('ok')} {ev.result.get('seconds', 0):.1f} s"
    if isinstance(ev, ErrorEvent):
        what = f"{ev.kind}: {ev.message[:120]}"
    if isinstance(ev, ToolResult) and not ev.ok:
        what += " (failed)"
    print(f"  {name} +{time.time() - t0:.0f} s turn {ev.turn} {ev.type} {what}".rstrip(), flush=True)


def _run_one(
    path: Path,
    backend: str,
    options: dict[str, Any],
    cap: int,
    max_turns: int,
    max_variants: int,
    confirmations: int,
    coverage: bool,
    floor: int,
    wall_s: float | None = None,
) -> dict[str, Any]:
    src = path.read_text()
    if _level(path) != "block":
        src = shrink_ints(src, cap, floor, batch_apart=floor < 64)
    name = f"{_level(path)}/{path.stem}"
    task = task_from_source(src, path.stem, backend, dict(options))
    pol = BuiltinPolicy(
        profile_best=False,
        max_variants=max_variants,
        first_correct=coverage,
        profile_reference=not coverage,
        analysis_timeout_s=120.0 if coverage else 300.0,
    )
    t0 = time.time()
    print(f"{name}: started", flush=True)
    res = run(
        task,
        pol,
        LocalEvaluator(),
        Budgets(max_turns=max_turns, confirmations=confirmations, max_wall_time_s=wall_s),
        on_event=partial(_trace, name, t0),
        on_progress=_Steps(name, t0),
    )
    secs = time.time() - t0
    evals = res.trajectory.of_type(EvaluationEvent)
    fin = res.trajectory.finished()
    an = pol.analysis
    capture = "no"
    if an is not None and an.ok:
        capture = str(an.data.get("capture", "fx"))
    best = res.best
    best_label = pol.label_of(best.files) if best else None
    generated = bool(res.verified) and not (best_label or "").startswith(FALLBACK_LABEL)
    return {
        "name": name,
        "path": str(path),
        "capture": capture,
        "capture_error": (an.error if an is not None and not an.ok else (an.data.get("fx_error") if an else None)),
        "correct": bool(res.verified),
        "reward": best.reward if best else None,
        "speedup_vs_eager": best.speedup_vs_eager if best else None,
        "speedup_vs_compile": best.speedup_vs_compile if best else None,
        "ci_low_vs_eager": _ci_low(best.result if best else None, "vs_eager"),
        "evaluations": len(evals),
        "turns": res.turns,
        "seconds": round(secs, 1),
        "seconds_in": _seconds_in(pol, evals, secs),
        "library_parts": getattr(pol, "library_parts", None),
        "best_label": best_label,
        "summary": fin.summary if fin else "",
        "generated_correct": generated,
        "ran": capture != "no" or bool(res.verified),
        "first_failure": None if generated else _first_failure(pol),
        "failures": pol.failures,
        "forbid_blockers": pol.blockers,
        "shrunk_from": floor,
        "candidates": [_candidate_row(t) for t in getattr(pol, "tried", [])],
    }


def _first_failure(pol: Any) -> str:
    """Why the row's best is not a generated candidate: the policy's first failure, or (none
    failed) that the generated ones were correct and lost to the reference's own computation."""
    if pol.failures:
        return pol.failures[0]
    generated = [t for t in pol.tried if t.correct and t.graph is not None]
    if generated:
        best = max(generated, key=lambda t: t.key())
        vs = "n/a" if best.speedup_vs_eager is None else f"{best.speedup_vs_eager:.2f}x"
        return f"generated candidates correct but slower than the reference's own computation (best {vs} vs eager)"
    return "no candidate tried"


def _seconds_in(pol: Any, evals: list[EvaluationEvent], secs: float) -> dict[str, float]:
    """Where one problem's wall time went: the policy's analysis, each protocol step summed over
    the evaluations (sandbox.schema.EvalResult.phases_s), and the rest (the policy's own work:
    planning, code generation; the loop). Level 3's problems took 100-400 s on the H200; this
    says which part to shorten."""
    spent: dict[str, float] = {"analysis": getattr(pol, "analysis_s", 0.0)}
    for ev in evals:
        for phase, s in (ev.result.get("phases_s") or {}).items():
            spent[phase] = spent.get(phase, 0.0) + s
    spent["rest"] = secs - sum(spent.values())
    return {k: round(v, 1) for k, v in spent.items()}


def _candidate_row(t: Any) -> dict[str, Any]:
    """What one candidate measured: which candidates lost, and by how much, is the evidence for the
    next change to the policy (a row's best alone hides it)."""
    return {
        "label": t.label,
        "correct": t.correct,
        "vs_eager": t.speedup_vs_eager,
        "vs_compile": t.speedup_vs_compile,
        "median_ms": t.median_ms,
        "reward": t.reward,
        "reason": (t.reasons or [""])[0][:200],
        "noisy": t.noisy[:400],  # why a correct, faster candidate got reward 1: judged on its worst pairing
        "memory": t.memory[:300],
    }


def out_of_memory(row: dict[str, Any]) -> bool:
    """A problem without a correct candidate whose failure was the device's memory (shards sharing
    one GPU: the reference's allocation met the others'), not the task: worth one retry."""
    if row["correct"]:
        return False
    texts = [str(x) for x in [row.get("first_failure"), row.get("capture_error"), *(row.get("failures") or [])]]
    return devmem.out_of_memory(texts)


def _ci_low(result: dict[str, Any] | None, which: str) -> float | None:
    """The lower end of the paired 95% interval of a speedup (EvalResult.speed.<which>.ci_low)."""
    sp = ((result or {}).get("speed") or {}).get(which) or {}
    return sp.get("ci_low")


def format_table(rows: list[dict[str, Any]]) -> str:
    def x(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}x"

    lines = [
        "| task | captured | correct | evals | vs eager (ci low) | vs compile | best candidate |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['capture']} | {'yes' if r['correct'] else 'NO'} | {r['evaluations']} | "
            f"{x(r['speedup_vs_eager'])} ({x(r.get('ci_low_vs_eager'))}) | {x(r.get('speedup_vs_compile'))} | "
            f"{(r.get('best_label') or '')[:60]} |"
        )
    n = len(rows) or 1
    ok = [r for r in rows if r["correct"]]
    lines += [
        "",
        f"captured {sum(r['capture'] != 'no' for r in rows)}/{len(rows)}, correct {len(ok)}/{len(rows)}, "
        f"faster than eager (reward >= 2) {sum((r['reward'] or 0) >= 2 for r in rows)}/{len(rows)}, "
        f"geomean vs eager over correct {x(geomean([r['speedup_vs_eager'] for r in ok if r['speedup_vs_eager']]))}, "
        f"over all (1.0x where none) {x(geomean([(r['speedup_vs_eager'] or 1.0) if r['correct'] else 1.0 for r in rows]) if n else None)}",
    ]
    fast = [r for r in ok if (r.get("ci_low_vs_eager") or 0) > 1.05]
    searched = [r for r in fast if SEARCH_TAG in (r.get("best_label") or "")]
    graphed = [r for r in fast if GRAPH_TAG in (r.get("best_label") or "")]
    fallback = [
        r
        for r in fast
        if (r.get("best_label") or "").startswith(FALLBACK_LABEL) and r not in searched and r not in graphed
    ]
    notes = [f"{len(fallback)} of them the reference's own computation: a timing artefact"] if fallback else []
    if graphed:
        notes.append(f"{len(graphed)} of them replayed as one CUDA graph")
    if searched:
        notes.append(f"{len(searched)} of them with cuDNN's algorithm search: a setting the user can make too")
    lines.append(
        f"faster than eager with the paired interval's low end above 1.05x: {len(fast)}/{len(rows)}"
        + (f" ({'; '.join(notes)})" if notes else "")
    )
    retried = [r["name"] for r in rows if r.get("retried")]
    if retried:
        lines.append(f"run again after running out of device memory beside other processes: {', '.join(retried)}")
    vc = [r["speedup_vs_compile"] for r in ok if r.get("speedup_vs_compile")]
    if vc:
        lines.append(
            f"faster than torch.compile (reward 3) {sum((r['reward'] or 0) >= 3 for r in rows)}/{len(rows)}, "
            f"geomean vs torch.compile over correct {x(geomean(vc))}"
        )
    spent = time_spent(rows)
    if spent:
        lines.append(spent)
    return "\n".join(lines)


def time_spent(rows: list[dict[str, Any]], top: int = 5) -> str:
    """One line: the problems' wall seconds and the steps that took most of them, summed."""
    total: dict[str, float] = {}
    for r in rows:
        for phase, s in (r.get("seconds_in") or {}).items():
            total[phase] = total.get(phase, 0.0) + s
    if not total:
        return ""
    whole = sum(r.get("seconds") or 0.0 for r in rows)
    parts = sorted(total.items(), key=lambda kv: -kv[1])[:top]
    return f"time: {whole:.0f} s over {len(rows)} problems, most in " + ", ".join(f"{k} {v:.0f} s" for k, v in parts)


def failure_class(line: str | None, width: int = 110) -> str:
    """A first failure as a class: numbers (sizes, lines, counts) folded, one line, cut to `width`."""
    s = re.sub(r"\d+", "N", (line or "none").splitlines()[0] if line else "none")
    return s if len(s) <= width else s[: width - 3] + "..."


def coverage_table(rows: list[dict[str, Any]]) -> str:
    """Per level: problems, ran on the backend, captured, a generated candidate correct (and of those,
    how many the plan names no torch-ops=forbid blocker for), any correct candidate (the reference's
    own computation included), and the first failures of the problems without a correct generated
    candidate, counted by class."""
    lines = [
        "| level | problems | ran | captured | generated correct | of them no ATen island | correct (incl. fallback) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    levels = sorted({r["name"].split("/")[0] for r in rows})
    for lvl in [*levels, "all"]:
        rs = [r for r in rows if lvl == "all" or r["name"].split("/")[0] == lvl]
        lines.append(
            f"| {lvl} | {len(rs)} | {sum(bool(r.get('ran')) for r in rs)} | "
            f"{sum(r['capture'] != 'no' for r in rs)} | {sum(bool(r.get('generated_correct')) for r in rs)} | "
            f"{sum(bool(r.get('generated_correct')) and not r.get('forbid_blockers') for r in rs)} | "
            f"{sum(bool(r['correct']) for r in rs)} |"
        )
    for lvl in levels:
        counts: dict[str, int] = {}
        for r in rows:
            if r["name"].split("/")[0] == lvl and not r.get("generated_correct"):
                c = failure_class(r.get("first_failure"))
                counts[c] = counts.get(c, 0) + 1
        if counts:
            lines += ["", f"{lvl} first failures (no correct generated candidate):"]
            lines += [f"  {n:>3}  {c}" for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    again = [r for r in rows if r.get("first_attempt")]
    if again:  # an incorrect candidate at the first sizes stays visible, whatever the second run found
        lines += ["", f"shrunk a second time (ints >= 16, batch_size apart) after the first sizes failed: {len(again)}"]
        lines += [f"  {r['name']}: {failure_class(r['first_attempt'], 90)}" for r in again]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The built-in policy on KernelBench problems and model blocks.")
    ap.add_argument("--kernelbench", type=Path, help="a KernelBench checkout (the folder holding level1..level3)")
    ap.add_argument("--level", type=int, nargs="*", default=[1, 2, 3])
    ap.add_argument(
        "--problems",
        nargs="*",
        default=[],
        help="LEVEL/NUMBER, e.g. 1/23 2/11 (with --kernelbench), or paths of files in its format",
    )
    ap.add_argument("--sample", type=int, default=0, help="problems drawn per level")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--stratified", action="store_true", help="--sample draws each problem family's share of the level (family_of)"
    )
    ap.add_argument("--blocks", action="store_true", help="also run benchmarks/blocks/*.py")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--torch-ops", choices=("allow", "forbid"), default="allow")
    ap.add_argument(
        "--preset",
        choices=("default", "kernelbench", "cuda-agent"),
        default="default",
        help="the sandbox's preset (kernelbench: no shape trial, which an exported graph fails under forbid)",
    )
    ap.add_argument(
        "--cap",
        type=int,
        default=32,
        help="KernelBench sizes shrunk so that the largest is at most this (0: as written)",
    )
    ap.add_argument(
        "--coverage",
        action="store_true",
        help="every problem of --level (unless --problems/--sample), "
        "each stopped at its first correct candidate, short timing; prints the coverage table per level",
    )
    ap.add_argument("--max-turns", type=int, help="default 12 (--coverage: 6)")
    ap.add_argument("--max-variants", type=int, default=1)
    ap.add_argument("--confirmations", type=int, default=0)
    ap.add_argument("--compile-baseline", action="store_true", help="also time torch.compile (slow on the CPU)")
    ap.add_argument(
        "--timing-budget",
        type=float,
        help="seconds of timed calls per callable (the sandbox's timing_budget_s; default: the sandbox's)",
    )
    ap.add_argument(
        "--shard", help="K/N: run only every N-th task from the K-th (0-based), for N processes sharing one machine"
    )
    ap.add_argument(
        "--time-limit",
        type=float,
        default=0.0,
        help="start no task after this many seconds (the rest are listed as not run)",
    )
    ap.add_argument(
        "--deadline",
        type=float,
        help="seconds from the start after which a problem takes no further turn and its best so far "
        "is its row (a shard killed by its timeout writes none: leave one evaluation's time after it)",
    )
    ap.add_argument(
        "--merge",
        nargs="*",
        type=Path,
        help="print the table of these --out files (nothing is run); "
        "a task in a later file replaces the same task of an earlier one",
    )
    ap.add_argument("--out", help="JSON with every task's row")
    args = ap.parse_args(argv)
    if args.merge:  # a task in a later file replaces the same task of an earlier one (a re-run of the failing set)
        merged = {r["name"]: r for f in args.merge for r in json.loads(f.read_text())["tasks"]}
        rows = list(merged.values())
        print(coverage_table(rows) if args.coverage else format_table(rows))
        return 0
    if args.max_turns is None:
        args.max_turns = 6 if args.coverage else 12
    if args.coverage and not args.timing_budget:
        args.timing_budget = 0.05
    paths: list[Path] = []
    if args.kernelbench is not None:
        paths += kernelbench_paths(
            args.kernelbench,
            args.level,
            args.problems,
            args.sample,
            args.seed,
            every=args.coverage and not (args.problems or args.sample),
            stratified=args.stratified,
        )
    elif args.problems:  # files of the KernelBench format (benchmarks/blocks_heldout/*/*.py) need no checkout
        missing = [p for p in args.problems if not Path(p).is_file()]
        if missing:
            ap.error(f"no such file: {', '.join(missing)} (LEVEL/NUMBER needs --kernelbench)")
        paths += [Path(p) for p in args.problems]
    if args.blocks:
        paths += sorted(BLOCKS_DIR.glob("*.py"))
    if not paths:
        ap.error("nothing to run: give --kernelbench with --problems/--sample, --problems with files, or --blocks")
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        paths = paths[k::n]
    options: dict[str, Any] = {"torch_ops": args.torch_ops, "preset": args.preset}
    if not args.compile_baseline:
        options["compile_baseline"] = False
    if args.timing_budget:
        options["timing_budget_s"] = args.timing_budget
    if args.coverage:  # coverage, not speed: few timed calls, one thread per process (shards share the cores)
        options |= {"min_timed_calls": 3, "timing_rounds": 3, "cpu_threads": 1, "eval_timeout_s": 180.0}
    env = environment(args.backend)
    rows: list[dict[str, Any]] = []
    started = time.time()
    queue = [(p, None) for p in paths]  # (problem, the first attempt's failure when this is its retry)
    while queue:
        p, first = queue.pop(0)
        if args.time_limit and time.time() - started > args.time_limit:
            print(f"{p.stem}: not run (past --time-limit {args.time_limit:.0f} s)", flush=True)
            continue
        row = run_one(
            p,
            args.backend,
            options,
            args.cap,
            args.max_turns,
            args.max_variants,
            args.confirmations,
            coverage=args.coverage,
            wall_s=None if args.deadline is None else max(1.0, args.deadline - (time.time() - started)),
        )
        if first is not None:
            row |= {"first_attempt": first, "retried": "out of device memory beside other processes"}
            rows = [r for r in rows if r["path"] != row["path"]]
        elif out_of_memory(row):  # once more after the rest, when other shards have likely moved on
            queue.append((p, row["first_failure"] or "out of memory"))
        rows.append(row)
        print(
            f"{row['name']:<60} capture={row['capture']:<7} correct={row['correct']} evals={row['evaluations']} "
            f"vs_eager={row['speedup_vs_eager']} ({row['seconds']:.0f} s)"
            + (f" first_failure={failure_class(row['first_failure'], 90)}" if row["first_failure"] else ""),
            flush=True,
        )
        if args.out:
            Path(args.out).write_text(
                json.dumps(
                    {"environment": env, "options": vars(args) | {"kernelbench": str(args.kernelbench)}, "tasks": rows},
                    indent=1,
                    default=str,
                )
            )
    print()
    print(coverage_table(rows) if args.coverage else format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
