"""Results the web app makes without running the sandbox, in the JSON form a worker sends:
a task whose worker died on every delivery, an evaluation no longer wanted, an answer that did
not come back in time. Each reads like a candidate fault, so the agent loop goes on."""

from __future__ import annotations

from typing import Any

from sandbox.schema import CompileResult, EvalResult, Status, Verdict
from webapp.queues import worker_died_reason


def failed_evaluation(why: str, status: Status = Status.RUNTIME_ERROR) -> dict[str, Any]:
    return EvalResult(status=status, verdict=Verdict.FAIL, reasons=[why]).to_dict()


def failed_build(why: str, mode: str = "none") -> dict[str, Any]:
    return CompileResult(ok=False, mode=mode, log=why).to_dict()


def worker_died_result() -> dict[str, Any]:
    """An evaluation or profile whose worker died on every delivery (the candidate killed it, say)."""
    return failed_evaluation(worker_died_reason("evaluation"))


def worker_died_build() -> dict[str, Any]:
    return failed_build(worker_died_reason("build"))


def timed_out(what: str, seconds: float) -> dict[str, Any]:
    return failed_evaluation(f"the {what} did not come back from its worker within {seconds:.0f} s", Status.TIMEOUT)


def build_timed_out(seconds: float) -> dict[str, Any]:
    return failed_build(f"the build did not come back within {seconds:.0f} s", mode="")
