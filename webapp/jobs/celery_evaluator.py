"""The agent's evaluator for the web app: the same three calls as agent.evaluator.LocalEvaluator,
sent through Celery so that builds run on the `compile` queue and evaluations on the `gpu` queue.

Results travel as JSON dicts and are rebuilt into the sandbox's dataclasses here, so the agent
loop cannot tell this evaluator from the in-process one. A result that does not come back in
time becomes a `timeout` result (the loop records it like any candidate fault) rather than an
exception that would end the job.
"""

from __future__ import annotations

from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings

from sandbox.schema import CompileError, CompileResult, EvalResult, Status, Verdict

COMPILE_TASK = "kernelwright.compile.build"
EVALUATE_TASK = "kernelwright.gpu.evaluate"
PROFILE_TASK = "kernelwright.gpu.profile"


def compile_result_from_dict(data: dict[str, Any]) -> CompileResult:
    d = dict(data)
    d["errors"] = [CompileError(**e) for e in d.get("errors", [])]
    return CompileResult(**d)


def _timeout_result(what: str, seconds: float) -> EvalResult:
    return EvalResult(
        status=Status.TIMEOUT,
        verdict=Verdict.FAIL,
        reasons=[f"the {what} did not come back from its worker within {seconds:.0f} s"],
    )


class CeleryEvaluator:
    def __init__(self, job_id: int | None = None, app=None, timeouts: dict[str, float] | None = None) -> None:
        from webapp.jobs.services import celery_app

        self.job_id = job_id
        self.app = app or celery_app()
        defaults = {"compile": 900.0, "evaluate": 1800.0, "profile": 1800.0}
        defaults.update(getattr(settings, "KERNELWRIGHT_EVAL_TIMEOUTS", {}) or {})
        defaults.update(timeouts or {})
        self.timeouts = defaults

    def _call(self, name: str, what: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        result = self.app.send_task(name, kwargs=kwargs)
        try:
            return result.get(timeout=self.timeouts[what], disable_sync_subtasks=False)
        except CeleryTimeout:
            result.revoke()
            return None

    def compile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> CompileResult:
        data = self._call(COMPILE_TASK, "compile", {"files": files, "options": options, "job_id": self.job_id})
        if data is None:
            return CompileResult(ok=False, log=f"the build did not come back within {self.timeouts['compile']:.0f} s")
        return compile_result_from_dict(data)

    def evaluate(self, task_source: str, files: dict[str, str], options: dict[str, Any], on_progress=None) -> EvalResult:
        kwargs = {"task_source": task_source, "files": files, "options": options, "job_id": self.job_id}
        data = self._call(EVALUATE_TASK, "evaluate", kwargs)
        if data is None:
            return _timeout_result("evaluation", self.timeouts["evaluate"])
        return EvalResult.from_dict(data)

    def profile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> EvalResult:
        kwargs = {"task_source": task_source, "files": files, "options": options, "job_id": self.job_id}
        data = self._call(PROFILE_TASK, "profile", kwargs)
        if data is None:
            return _timeout_result("profile", self.timeouts["profile"])
        return EvalResult.from_dict(data)
