"""Template filters for the trajectory viewer. They return plain data (lists of tuples, strings);
the templates render them with autoescaping, so no filter here ever marks anything safe."""

from __future__ import annotations

import json
import re
from typing import Any

from django import template
from django.conf import settings
from django.templatetags.static import static
from django.urls import reverse

from webapp.jobs.highlight import Line, highlight_path
from webapp.jobs.results import SpeedReport

register = template.Library()

ERROR_LINE = re.compile(r"\b(error|fatal|undefined reference|Traceback|Exception)\b", re.IGNORECASE)
WARNING_LINE = re.compile(r"\bwarning\b", re.IGNORECASE)


@register.filter
def difflines(diff: str | None) -> list[tuple[str, str]]:
    """Unified diff -> (css class, line)."""
    out = []
    for line in (diff or "").splitlines():
        if line.startswith(("+++", "---")):
            cls = "d-file"
        elif line.startswith("@@"):
            cls = "d-hunk"
        elif line.startswith("+"):
            cls = "d-add"
        elif line.startswith("-"):
            cls = "d-del"
        else:
            cls = ""
        out.append((cls, line))
    return out


@register.filter
def code_lines(text: Any, path: Any = None) -> list[Line]:
    """Code -> highlighted lines of (css class, text) segments, language from the file name."""
    return highlight_path(text if isinstance(text, str) else str(text or ""), path if isinstance(path, str) else None)


@register.filter
def without_blob(source: Any) -> str:
    """A task source as a page shows it: a .pt2 task's base64 file cut to a one-line marker
    (agent.tools.source_for_model; the download keeps the whole task)."""
    from agent.tools import source_for_model

    return source_for_model(source if isinstance(source, str) else str(source or ""))


@register.filter
def loglines(log: str | None) -> list[tuple[str, str]]:
    """Compile log -> (css class, line) with errors and warnings marked."""
    out = []
    for line in (log or "").splitlines():
        cls = "l-err" if ERROR_LINE.search(line) else "l-warn" if WARNING_LINE.search(line) else ""
        out.append((cls, line))
    return out


@register.filter
def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@register.filter
def ms(value: Any) -> str:
    try:
        return f"{float(value):.4g} ms"
    except (TypeError, ValueError):
        return "n/a"


@register.filter
def speedup(value: Any) -> str:
    try:
        return f"{float(value):.3f}x"
    except (TypeError, ValueError):
        return "n/a"


@register.filter
def speed_parts(evaluation: Any) -> list[str]:
    """An EvalResult dict's speedups in words, with their intervals (webapp.jobs.results)."""
    return SpeedReport.of(evaluation if isinstance(evaluation, dict) else None).parts()


@register.filter
def best_speed_parts(event: Any, behind: Any) -> list[str]:
    """A best_changed event's speedups in words, from the evaluation it came from (`behind`:
    webapp.jobs.turns.evaluations_behind, found for the whole turn in one pass)."""
    behind = behind if isinstance(behind, dict) else None
    ev = event if isinstance(event, dict) else {}
    return SpeedReport.of(
        (behind or {}).get("result"), ev.get("speedup_vs_eager"), ev.get("speedup_vs_compile")
    ).parts()


@register.filter
def percent(value: Any) -> str:
    try:
        return f"{100 * float(value):.1f}%"
    except (TypeError, ValueError):
        return "n/a"


@register.filter
def reward_class(reward: Any) -> str:
    return {-1: "r-bad", 1: "r-ok", 2: "r-good", 3: "r-best"}.get(reward, "r-none")


@register.filter
def long_args(arguments: Any) -> list[tuple[str, str, bool, str | None]]:
    """Tool-call arguments -> (name, text, is_long, path): long texts (file contents) go in a
    <details>, highlighted by the call's `path` argument when it has one (a filter argument that
    does not resolve would make the template raise, so the path travels in the tuple)."""
    if not isinstance(arguments, dict):
        return [("arguments", str(arguments), False, None)]
    path = arguments.get("path") if isinstance(arguments.get("path"), str) else None
    out = []
    for k, v in arguments.items():
        text = v if isinstance(v, str) else json.dumps(v, default=str)
        out.append((k, text, "\n" in text or len(text) > 120, path))
    return out


@register.simple_tag
def plotly_src() -> str:
    """Where plotly.js is served: the foundation's static path (from the plotly package)."""
    if settings.PLOTLY_STATIC_PATH:
        return static(settings.PLOTLY_STATIC_PATH)
    return reverse("jobs:plotly_js")


# -- what the numbers and options mean (titles and the job page's legend) ----------------------
REWARD_MEANING = {
    -1: "incorrect, failed to build or run, or rejected by the audit",
    1: "correct, but not measurably more than 5% faster than eager PyTorch",
    2: "correct and more than 5% faster than eager PyTorch",
    3: "correct and more than 5% faster than both eager PyTorch and torch.compile",
}
REWARD_NOTE = "(the CUDA Agent paper's milestone reward; 'faster' is judged on the lower end of the speedup's interval, and on a noisy timing window on its worst pairing of rounds)"
TORCH_OPS_MEANING = {
    "forbid": "the candidate's forward must compute with its own kernels: torch compute operators are rejected "
    "(allocation, views and library GEMM/convolution are allowed)",
    "allow": "the candidate may call torch operators as well as its own kernels",
}
PRECISION_MEANING = {
    "task": "the task's own dtypes",
    "float32": "the model's floating parameters and buffers and every floating input cast to float32, in the reference and the candidate",
    "bfloat16": "the model's floating parameters and buffers and every floating input cast to bfloat16, in the reference and the candidate",
    "float16": "the model's floating parameters and buffers and every floating input cast to float16, in the reference and the candidate",
}
POLICY_MEANING = {
    "builtin": "the built-in policy (offline, no model)",
    "openai": "a model behind an OpenAI-compatible endpoint",
}
BACKEND_MEANING = {
    "auto": "CUDA when a GPU is there, else the CPU",
    "cpu": "C++ kernels on the CPU",
    "cuda": "CUDA kernels on the GPU",
}


@register.filter
def reward_title(reward: Any) -> str:
    """The tooltip of a reward: what this value means."""
    meaning = REWARD_MEANING.get(reward)
    if meaning is None:
        return "not evaluated"
    return f"reward {reward}: {meaning} {REWARD_NOTE}"


@register.simple_tag
def reward_scale() -> list[tuple[int, str]]:
    return sorted(REWARD_MEANING.items())


def preset_meaning(preset: str) -> str:
    """A tolerance preset in words, from the sandbox's own table (read only)."""
    try:
        from sandbox.options import PRESETS
    except Exception:  # the web process need not have the sandbox's dependencies
        return ""
    spec = PRESETS.get(preset)
    if not isinstance(spec, dict):
        return ""
    tols = spec.get("tolerances") or {}
    parts = [f"{dtype} atol {t.atol:g}, rtol {t.rtol:g}" for dtype, t in tols.items() if hasattr(t, "atol")]
    extra = [
        label
        for key, label in (
            ("reinit_trial", "re-initialised weights"),
            ("wide_trial", "wide-range inputs"),
            ("shape_trial", "another input shape"),
        )
        if spec.get(key)
    ]
    text = (
        "correct when |candidate - reference| <= atol + rtol * |reference| for every element (" + "; ".join(parts) + ")"
    )
    trials = spec.get("random_trials")
    if trials:
        text += f"; {trials} random input trials" + (" plus " + ", ".join(extra) if extra else "")
    return text


@register.filter
def job_options(options: Any) -> list[tuple[str, str, str]]:
    """A job's recorded options as (label, value, explanation); an option the job does not
    record (an imported trajectory's) is left out rather than shown as "?"."""
    options = options if isinstance(options, dict) else {}
    rows = []
    for key, label, meanings in (
        ("backend", "backend", BACKEND_MEANING),
        ("policy", "policy", POLICY_MEANING),
        ("max_turns", "max turns", None),
        ("preset", "tolerance preset", None),
        ("torch_ops", "torch ops", TORCH_OPS_MEANING),
        ("precision", "precision", PRECISION_MEANING),
    ):
        value = options.get(key)
        if value in (None, ""):
            continue
        if key == "preset":
            help_text = preset_meaning(str(value))
        elif key == "torch_ops":
            help_text = "torch ops in the candidate: " + TORCH_OPS_MEANING.get(str(value), "")
        elif meanings:
            help_text = meanings.get(str(value), "")
        else:
            help_text = "the most turns the agent may take"
        rows.append((label, str(value), help_text))
    return rows


@register.filter
def option_help(choices: Any, option: str) -> list[tuple[str, str]]:
    """The new-job form's choices of `option` with what each means."""
    out = []
    for c in choices or ():
        if option == "preset":
            out.append((c, preset_meaning(c)))
        elif option == "torch_ops":
            out.append((c, TORCH_OPS_MEANING.get(c, "")))
        elif option == "precision":
            out.append((c, PRECISION_MEANING.get(c, "")))
        else:
            out.append((c, ""))
    return out


@register.filter
def task_summary(source: Any, limit: int = 200) -> str:
    """The first paragraph of a task module's docstring (parsed with ast, never imported)."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(source if isinstance(source, str) else "")) or ""
    except (SyntaxError, ValueError):
        return ""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
