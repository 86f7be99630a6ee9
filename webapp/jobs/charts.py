"""Plotly figures of a job, built server-side as plain dicts and drawn by the locally served
plotly.js (no CDN: the product must work offline).

Every number comes from stored evaluation results; nothing is interpolated or smoothed. A chart
without data is omitted rather than drawn empty, so an absent chart means "not measured".
"""

from __future__ import annotations

from typing import Any

from webapp.jobs.models import Job, Turn

LAYOUT = {"margin": {"l": 60, "r": 20, "t": 40, "b": 50}, "height": 360, "legend": {"orientation": "h", "y": -0.25}}


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    return {**LAYOUT, "title": {"text": title}, **extra}


def speedup_over_turns(turns: list[Turn]) -> dict[str, Any] | None:
    points = [t for t in turns if t.speedup_eager is not None or t.speedup_compile is not None]
    if not points:
        return None
    xs = [t.index for t in points]
    best, best_line = None, []
    for t in points:
        if t.reward is not None and t.reward >= 1 and t.speedup_eager is not None:
            best = t.speedup_eager if best is None else max(best, t.speedup_eager)
        best_line.append(best)
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "vs eager", "x": xs, "y": [t.speedup_eager for t in points]},
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "vs torch.compile",
            "x": xs,
            "y": [t.speedup_compile for t in points],
        },
        {"type": "scatter", "mode": "lines", "name": "best correct vs eager", "x": xs, "y": best_line, "line": {"dash": "dot"}},
    ]
    layout = _layout(
        "Speedup per turn (>1 is faster)",
        xaxis={"title": {"text": "turn"}, "dtick": 1},
        yaxis={"title": {"text": "speedup (x)"}},
        shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1, "line": {"dash": "dash", "width": 1}}],
    )
    return {"data": data, "layout": layout}


def best_vs_baselines(evaluation: dict[str, Any] | None) -> dict[str, Any] | None:
    timing = (evaluation or {}).get("timing") or {}
    bars = [(label, timing.get(key)) for label, key in (("eager", "eager"), ("torch.compile", "compile"), ("best candidate", "candidate"))]
    bars = [(label, s) for label, s in bars if s]
    if not bars:
        return None
    data = [
        {
            "type": "bar",
            "x": [label for label, _ in bars],
            "y": [s["median_ms"] for _, s in bars],
            "error_y": {
                "type": "data",
                "symmetric": False,
                "array": [s["max_ms"] - s["median_ms"] for _, s in bars],
                "arrayminus": [s["median_ms"] - s["min_ms"] for _, s in bars],
            },
            "hovertext": [f"median {s['median_ms']:.4g} ms, min {s['min_ms']:.4g}, max {s['max_ms']:.4g}, {s['trials']} runs" for _, s in bars],
            "hoverinfo": "text",
        }
    ]
    clock = timing.get("clock") or "?"
    return {"data": data, "layout": _layout(f"Best candidate vs baselines (median, bars = min..max; clock {clock})", yaxis={"title": {"text": "ms"}})}


def time_per_kernel(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r.get("total_ms", 0.0))[-20:]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "y": [r.get("name", "?")[:60] for r in rows],
            "x": [r.get("total_ms", 0.0) for r in rows],
            "hovertext": [f"{r.get('calls', 0)} calls, {100 * r.get('share', 0.0):.1f}%" for r in rows],
        }
    ]
    return {"data": data, "layout": _layout("Time per kernel of the best candidate", xaxis={"title": {"text": "ms"}}, margin={"l": 220, "r": 20, "t": 40, "b": 50})}


def roofline(roof: dict[str, Any] | None, evaluation: dict[str, Any] | None) -> dict[str, Any] | None:
    roof = roof or {}
    flops, nbytes = float(roof.get("flops") or 0), float(roof.get("min_bytes") or 0)
    bw, peak = float(roof.get("peak_bandwidth_gbs") or 0), float(roof.get("peak_tflops") or 0)
    if not (flops > 0 and nbytes > 0 and bw > 0 and peak > 0):
        return None
    intensity = flops / nbytes
    ridge = peak * 1e3 / bw  # FLOP/byte where the roofs meet (TFLOP/s vs GB/s)
    xs = [min(intensity, ridge) / 100, ridge, max(intensity, ridge) * 100]
    roof_y = [min(peak, x * bw / 1e3) for x in xs]
    data = [{"type": "scatter", "mode": "lines", "name": f"roof ({bw:.0f} GB/s, {peak:.1f} TFLOP/s, measured)", "x": xs, "y": roof_y}]
    timing = (evaluation or {}).get("timing") or {}
    for label, key in (("eager", "eager"), ("torch.compile", "compile"), ("best candidate", "candidate")):
        stats = timing.get(key)
        if stats and stats.get("median_ms"):
            achieved = flops / (stats["median_ms"] * 1e-3) / 1e12
            data.append({"type": "scatter", "mode": "markers", "name": f"{label} ({achieved:.3g} TFLOP/s)", "x": [intensity], "y": [achieved], "marker": {"size": 12}})
    layout = _layout(
        f"Roofline on {roof.get('device') or 'the device'} ({roof.get('bound') or '?'}-bound)",
        xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
        yaxis={"type": "log", "title": {"text": "TFLOP/s"}},
    )
    return {"data": data, "layout": layout}


def best_profile(job: Job) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Profiler rows and roofline of the best version: from a profile event if one ran, else from
    the best evaluation result. Reads turns newest first, one at a time, and stops at the match."""
    rows: list[dict[str, Any]] = []
    roof = None
    for t in job.turns.order_by("-index").only("events").iterator(chunk_size=8):
        for e in reversed(t.events):
            if e.get("type") == "profile" and (job.best_version is None or e.get("version") == job.best_version):
                return e.get("rows") or [], e.get("roofline") or (job.best_evaluation or {}).get("roofline")
    if job.best_evaluation:
        rows = job.best_evaluation.get("profile") or []
        roof = job.best_evaluation.get("roofline")
    return rows, roof


def job_charts(job: Job, turns: list[Turn]) -> dict[str, Any]:
    """`turns` need only their summary columns (events may be deferred)."""
    rows, roof = best_profile(job)
    charts = {
        "speedup": speedup_over_turns(turns),
        "baselines": best_vs_baselines(job.best_evaluation),
        "kernels": time_per_kernel(rows),
        "roofline": roofline(roof, job.best_evaluation),
    }
    return {k: v for k, v in charts.items() if v is not None}
