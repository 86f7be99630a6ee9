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
    path = getattr(settings, "PLOTLY_STATIC_PATH", "plotly/plotly.min.js")
    if path:
        return static(path)
    return reverse("jobs:plotly_js")
