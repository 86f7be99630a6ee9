"""How the loop reaches the sandbox: an injected object, so one loop serves every deployment.

The CLI and tests use LocalEvaluator (the sandbox API in-process; the sandbox runs each
candidate in its own child process, so a crashing kernel cannot take the loop down). The web
app supplies an evaluator that sends the same calls through Celery queues. Options travel as a
plain dict (JSON-serialisable, so a queue can carry them); results come back as the sandbox's
dataclasses (`sandbox.schema`) or, from a remote evaluator, as the JSON form a worker sent
(`to_dict()`), which the tools rebuild once (agent.tools.eval_result_and_dict) and store as it came.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

ProgressCallback = Callable[[str, dict[str, Any]], None]


@runtime_checkable
class Evaluator(Protocol):
    def compile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> Any:
        """-> sandbox.schema.CompileResult, or its to_dict() form"""

    def evaluate(
        self,
        task_source: str,
        files: dict[str, str],
        options: dict[str, Any],
        on_progress: ProgressCallback | None = None,
    ) -> Any:
        """-> sandbox.schema.EvalResult (or its to_dict() form); never raises for faults of the candidate."""

    def profile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> Any:
        """-> sandbox.schema.EvalResult (or its to_dict() form) with `profile` rows and `roofline`."""


def make_options(options: dict[str, Any] | Any) -> Any:
    """A dict of EvalOptions fields -> sandbox.EvalOptions (an EvalOptions passes through)."""
    from sandbox import EvalOptions

    if isinstance(options, EvalOptions):
        return options
    return EvalOptions.from_dict(dict(options or {}))


class LocalEvaluator:
    """The sandbox API, called in this process. `defaults` are merged under each call's options."""

    def __init__(self, **defaults: Any) -> None:
        self.defaults = defaults

    def _opts(self, options: dict[str, Any] | None) -> Any:
        return make_options({**self.defaults, **(options or {})})

    def compile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> Any:
        from sandbox import compile_candidate

        return compile_candidate(files, self._opts(options))

    def evaluate(
        self,
        task_source: str,
        files: dict[str, str],
        options: dict[str, Any],
        on_progress: ProgressCallback | None = None,
    ) -> Any:
        from sandbox import evaluate

        return evaluate(task_source, files, self._opts(options), on_progress=on_progress)

    def profile(self, task_source: str, files: dict[str, str], options: dict[str, Any]) -> Any:
        from sandbox import profile_candidate

        return profile_candidate(task_source, files, self._opts(options))
