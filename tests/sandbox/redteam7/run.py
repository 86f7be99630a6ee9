"""Red team 7 runner: evaluate one candidate folder on a task, the way test_hacks.py does.

usage: .venv/bin/python -m tests.sandbox.redteam7.run <folder> [task] [key=value ...]
The task is a file name under tests/sandbox/tasks/ or a path (a folder's own task.py wins).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from sandbox import EvalOptions, evaluate, load_candidate

HERE = Path(__file__).parent
TASKS = HERE.parent / "tasks"
CACHE = Path(tempfile.gettempdir()) / "kw-redteam7-cache"


def options(**overrides) -> EvalOptions:
    kw = dict(
        backend="cpu",
        compile_baseline=False,
        timing_budget_s=0.05,
        min_timed_calls=20,
        warmup_calls=2,
        cache_dir=str(CACHE),
        eval_timeout_s=120,
    )
    kw.update(overrides)
    return EvalOptions(**kw)


def main() -> None:
    folder = Path(sys.argv[1])
    if not folder.is_absolute() and not folder.exists():
        folder = HERE / folder
    args = sys.argv[2:]
    task_name = None
    if args and "=" not in args[0]:
        task_name = args.pop(0)
    over = {}
    for a in args:
        k, v = a.split("=", 1)
        try:
            over[k] = json.loads(v)
        except json.JSONDecodeError:
            over[k] = v
    files = load_candidate(folder)
    files.pop("expected.json", None)
    meta = {}
    if "expected.json" in [p.name for p in folder.iterdir()]:
        meta = json.loads((folder / "expected.json").read_text())
    task_file = None
    if (folder / "task.py").exists() and task_name is None:
        task_file = folder / "task.py"
        files.pop("task.py", None)
    else:
        files.pop("task.py", None)
        task_name = task_name or meta.get("task", "softmax_tiny.py")
        task_file = Path(task_name) if Path(task_name).exists() else TASKS / task_name
    over = {**meta.get("options", {}), **over}
    t0 = time.time()
    res = evaluate(task_file.read_text(), files, options(**over))
    dt = time.time() - t0
    out = {
        "folder": folder.name,
        "task": str(task_file.name),
        "options": over,
        "status": res.status.value,
        "reward": res.reward,
        "speedup_vs_eager": res.speedup_vs_eager,
        "verdict": getattr(res.speed, "verdict", None) if res.speed else None,
        "reasons": res.reasons,
        "trials": [t.message for t in res.trials if t.message][:12],
        "findings": [f for f in res.audit.findings if not f.startswith(("isolation", "transport"))][:12],
        "cand_median_ms": res.timing.candidate.median_ms if res.timing and res.timing.candidate else None,
        "cand_mean_ms": res.timing.candidate.mean_ms if res.timing and res.timing.candidate else None,
        "eager_median_ms": res.timing.eager.median_ms if res.timing and res.timing.eager else None,
        "eager_mean_ms": res.timing.eager.mean_ms if res.timing and res.timing.eager else None,
        "calls_per_block": res.timing.calls_per_block if res.timing else None,
        "cand_block_medians": [round(r.candidate_ms, 4) for r in res.timing.rounds] if res.timing else None,
        "eager_block_medians": [round(r.eager_ms, 4) for r in res.timing.rounds] if res.timing else None,
        "unaccounted_ms": [{k: round(v, 4) for k, v in r.unaccounted_ms.items()} for r in res.timing.rounds]
        if res.timing
        else None,
        "seconds": round(dt, 1),
    }
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
