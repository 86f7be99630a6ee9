"""An evaluator of its own for one escape test: `python -m tests.sandbox.escape.runner SPEC OUT`.

SPEC (JSON): {"mode": "evaluate", "task", "files", "cache_dir", "options"} or {"mode": "analyze",
"task"}. Runs the hostile evaluation (or the built-in policy's analysis), writes OUT, then runs an
honest one in the same process (its zygote, its sandbox) and writes OUT again:
{"finished": true, "elapsed_s", "result" (EvalResult.to_dict() or the Analysis), "honest": {"ok", "detail"}}.
An OUT without "finished" means this process was killed or hung before the end; "raised" holds
the traceback where evaluate() (or the analysis) raised instead of returning.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path


def _write(path: Path, out: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(path)


def _evaluate(spec: dict) -> Iterator[dict]:
    from sandbox import evaluate, protocol
    from tests.sandbox.escape.support import quick_options

    protocol.RUN_TIME_REFUSALS = False  # the walls alone, as tests/sandbox/escape/conftest.walls_only
    from tests.sandbox.test_isolation import assert_next_evaluation_works

    res = evaluate(spec["task"], spec["files"], quick_options(spec["cache_dir"], **spec.get("options", {})))
    yield res.to_dict()
    try:
        assert_next_evaluation_works(lambda **kw: quick_options(spec["cache_dir"], **kw))
        yield {"ok": True, "detail": ""}
    except AssertionError as exc:
        yield {"ok": False, "detail": str(exc)[:2000]}


def _analyze(spec: dict) -> Iterator[dict]:
    from agent.builtin.graph import analyze_source
    from tests.sandbox.helpers import task

    a = analyze_source(spec["task"], device="cpu", profile=False, timeout=120)
    yield {"ok": a.ok, "error": a.error, "data": a.data}
    honest = analyze_source(task("softmax_tiny.py"), device="cpu", profile=False, timeout=120)
    yield {"ok": honest.ok, "detail": honest.error}


def main() -> int:
    spec_path, out_path = Path(sys.argv[1]), Path(sys.argv[2])
    spec = json.loads(spec_path.read_text())
    steps = (_evaluate if spec["mode"] == "evaluate" else _analyze)(spec)
    started = time.monotonic()
    out: dict = {}
    try:
        out["result"] = next(steps)
        out["elapsed_s"] = time.monotonic() - started
        _write(out_path, out)
        out["honest"] = next(steps)
    except Exception:
        out["raised"] = traceback.format_exc(limit=8)
        _write(out_path, out)
        return 1
    out["finished"] = True
    _write(out_path, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
