"""`python -m benchmarks.block_accounts TASK.py [TASK.py ...] --evals N`: every timing block's
account next to the parent's wall time, for an honest copy of each task.

The parent rejects a block whose account does not add up (sandbox.protocol._Paired._block_median)
as a forged reply. An honest block must never be rejected, and on a loaded GPU host it was twice
(host-bound DenseNet, LSTM and GRU blocks, 2026-12-07). This evaluates an honest copy of each task
(the reference renamed ModelNew) and writes one JSON line per block: the account, the parent's
wall time, the measured time it claims (`spent`: calls plus back-to-back pass) and whether it
was accepted. Run several at once to load the host as KernelBench shards do. Numbers are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from sandbox import EvalOptions, evaluate, protocol

ACCOUNT_KEYS = ("median_ms", "sum_ms", "raw_ms", "loop_ms", "loop_sum_ms", "calls")


def logging_accounts(out: Path) -> Any:
    """Wraps the parent's check so that each block's account is written to `out` before it is
    judged; returns the original check (to restore it)."""
    check = protocol._Paired._block_median

    def logged(self: Any, name: str, reply: dict, wall_ms: float) -> float:
        rec: dict[str, Any] = {k: reply.get(k) for k in ACCOUNT_KEYS} | {"name": name, "wall_ms": wall_ms}
        rec["spent"] = float(reply.get("raw_ms", 0.0)) + float(reply.get("loop_sum_ms", 0.0))
        try:
            median = check(self, name, reply, wall_ms)
            rec["ok"] = True
            return median
        except Exception as exc:
            rec |= {"ok": False, "error": str(exc)[:300]}
            raise
        finally:
            with out.open("a") as f:
                f.write(json.dumps(rec) + "\n")

    protocol._Paired._block_median = logged  # type: ignore[method-assign]
    return check


def honest_copy(source: str) -> dict[str, str]:
    return {"model_new.py": source.replace("class Model(", "class ModelNew(")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks", nargs="+", type=Path)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--evals", type=int, default=3)
    ap.add_argument("--compile-baseline", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("block_accounts.jsonl"))
    args = ap.parse_args(argv)
    check = logging_accounts(args.out)
    try:
        for path in args.tasks:
            src = path.read_text()
            for i in range(args.evals):
                t0 = time.time()
                opts = EvalOptions(backend=args.backend, torch_ops="allow", compile_baseline=args.compile_baseline)
                res = evaluate(src, honest_copy(src), opts)
                why = (res.reasons or [""])[0].splitlines()[0][:200] if res.reasons else ""
                print(f"{path.stem} {i}: {res.status.value} ({time.time() - t0:.0f} s) {why}".rstrip(), flush=True)
    finally:
        protocol._Paired._block_median = check  # type: ignore[method-assign]
    rows = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    rejected = [r for r in rows if not r["ok"]]
    tightest = max((r["spent"] / r["wall_ms"] for r in rows if r["wall_ms"]), default=0.0)
    print(
        f"{len(rows)} blocks, {len(rejected)} rejected; the most a block's measured time took of its wall: {tightest:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
