"""Scripted model conversations for the scripted server: what a model would answer, turn by turn.

The "good" answers are the real candidates in fixtures/ (a C++ row softmax for the cpu backend,
a CUDA one for cuda); the broken variants are derived from them by small, visible edits, so a
test run exercises the real compile errors and correctness failures of the sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def candidate(backend: str = "cpu") -> dict[str, str]:
    """The correct softmax candidate: {relative path: text}."""
    root = FIXTURES / ("softmax_cuda" if backend == "cuda" else "softmax_cpu")
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def wrong_candidate(backend: str = "cpu") -> dict[str, str]:
    """The softmax candidate with its normalisation removed: compiles, runs, and is incorrect."""
    files = dict(candidate(backend))
    k = kernel_path(backend)
    files[k] = files[k].replace(*(CUDA_WRONG_BREAK if backend == "cuda" else WRONG_BREAK))
    return files


def kernel_path(backend: str = "cpu") -> str:
    return "kernels/softmax.cu" if backend == "cuda" else "kernels/softmax.cpp"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def reply(*calls: dict[str, Any], content: str = "", reasoning: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"content": content, "tool_calls": list(calls)}
    if reasoning:
        out["reasoning"] = reasoning
    return out


def write_all(files: dict[str, str]) -> list[dict[str, Any]]:
    return [call("write_file", path=p, content=c) for p, c in sorted(files.items())]


# Small edits that break the good kernel in known ways.
COMPILE_BREAK = ("const float inv = 1.0f / s;", "const float inv = 1.0f / s")  # missing semicolon
WRONG_BREAK = ("const float inv = 1.0f / s;", "const float inv = 1.0f;")  # never normalises
CUDA_WRONG_BREAK = ("const float inv = 1.0f / red[0];", "const float inv = 1.0f;")


def good_run(backend: str = "cpu", profile: bool = False) -> dict[str, Any]:
    """Read the task, write the candidate, compile, evaluate, (profile,) finish."""
    files = candidate(backend)
    replies = [
        reply(call("read_file", path="reference.py"), content="Reading the task first."),
        reply(*write_all(files), content="A fused one-pass-per-row softmax kernel."),
        reply(call("compile")),
        reply(call("evaluate")),
    ]
    if profile:
        replies.append(reply(call("profile"), content="Where does the time go?"))
    replies.append(reply(call("finish", summary="fused row softmax kernel")))
    return {"replies": replies}


def compile_fix_run() -> dict[str, Any]:
    files = candidate("cpu")
    k = kernel_path("cpu")
    broken = dict(files)
    broken[k] = files[k].replace(*COMPILE_BREAK)
    return {
        "replies": [
            reply(*write_all(broken), content="First attempt."),
            reply(call("compile")),
            reply(
                call("edit_file", path=k, old=COMPILE_BREAK[1] + "\n", new=COMPILE_BREAK[0] + "\n"),
                content="Missing semicolon; fixing.",
            ),
            reply(call("evaluate")),
            reply(call("finish", summary="fixed the compile error")),
        ]
    }


def incorrect_then_correct_run(backend: str = "cpu") -> dict[str, Any]:
    files = candidate(backend)
    k = kernel_path(backend)
    brk = CUDA_WRONG_BREAK if backend == "cuda" else WRONG_BREAK
    wrong = dict(files)
    wrong[k] = files[k].replace(*brk)
    return {
        "replies": [
            reply(*write_all(wrong), content="Trying a kernel."),
            reply(call("evaluate")),
            reply(call("edit_file", path=k, old=brk[1], new=brk[0]), content="Forgot to normalise."),
            reply(call("evaluate")),
            reply(call("finish", summary="normalised the rows")),
        ]
    }


def regression_run() -> dict[str, Any]:
    """Correct first, then a broken 'optimisation': the result must be the earlier version."""
    files = candidate("cpu")
    k = kernel_path("cpu")
    return {
        "replies": [
            reply(*write_all(files)),
            reply(call("evaluate")),
            reply(call("edit_file", path=k, old=WRONG_BREAK[0], new=WRONG_BREAK[1]), content="Trying something."),
            reply(call("evaluate")),
            reply(call("finish", summary="done")),
        ]
    }


SCENARIOS = {
    "softmax-cpu": lambda: good_run("cpu", profile=True),
    "softmax-cuda": lambda: good_run("cuda", profile=True),
    "compile-fix-cpu": compile_fix_run,
    "incorrect-then-correct-cpu": lambda: incorrect_then_correct_run("cpu"),
    "incorrect-then-correct-cuda": lambda: incorrect_then_correct_run("cuda"),
    "regression-cpu": regression_run,
}
