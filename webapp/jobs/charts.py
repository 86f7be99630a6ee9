"""Plotly figures of a job, built server-side as plain dicts and drawn by the locally served
plotly.js (no CDN: the product must work offline).

Every number comes from stored evaluation results; nothing is interpolated or smoothed. A chart
without data is omitted rather than drawn empty, so an absent chart means "not measured".
"""

from __future__ import annotations

from typing import Any

from webapp.jobs.models import Job, Turn
from webapp.jobs.results import BestResult

# No width anywhere: the figure takes its grid cell's width (autosize) and follows it (the page
# draws with `responsive: true`); only the height is fixed.
LAYOUT = {
    "autosize": True,
    "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
    "height": 360,
    "legend": {"orientation": "h", "y": -0.25},
}
# A log axis labelled at every power of ten as a plain number: without a dtick plotly labels the
# minor ticks too ("5 2 1 5" between decades).
LOG_AXIS = {"type": "log", "dtick": 1, "tickformat": "~g", "minor": {"ticks": "inside", "showgrid": False}}


def _plain(value: Any, limit: int | None = None) -> str:
    """Text from a result (a kernel's name, the device, the clock, the verdict) as plotly shows
    it: plotly.js reads tags in every label and title (<a href> to any http(s) address, <span
    style>, <br>), so the brackets become look-alikes and the text stays text. Cut before that,
    so a cut never leaves half a tag."""
    text = str(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("<", "‹").replace(">", "›")


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    return {**LAYOUT, "title": {"text": title}, **extra}


def best_line(turns: list[Turn], result: BestResult | None) -> list[float | None]:
    """The best verified candidate's speedup vs eager after each turn, ending at the job's result
    (Job.result(): the confirmed number the header shows, or none once a confirmation failed)."""
    best, line = None, []
    for t in turns:
        if t.improved and t.best_speedup_eager is not None:
            best = t.best_speedup_eager
        line.append(best)
    if line:
        eager = result.speed.vs_eager if result else None
        line[-1] = eager.ratio if eager else None
    return line


def speedup_over_turns(turns: list[Turn], result: BestResult | None = None) -> dict[str, Any] | None:
    points = [t for t in turns if t.speedup_eager is not None or t.speedup_compile is not None or t.improved]
    if not points:
        return None
    xs = [t.index for t in points]
    if turns and points[-1] is not turns[-1]:  # the result is reported in the last turn
        points.append(turns[-1])
        xs.append(turns[-1].index)
    best = best_line(points, result)
    eager = result.speed.vs_eager if result else None
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "vs eager",
            "x": xs,
            "y": [t.speedup_eager for t in points],
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "vs torch.compile",
            "x": xs,
            "y": [t.speedup_compile for t in points],
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "best verified vs eager",
            "x": xs,
            "y": best,
            "line": {"dash": "dot"},
        },
    ]
    if eager is not None:  # the header's number, with its interval as whiskers
        marker: dict[str, Any] = {
            "type": "scatter",
            "mode": "markers",
            "name": f"result: {eager.text()}"[:120],
            "x": [xs[-1]],
            "y": [eager.ratio],
            "marker": {"size": 11, "symbol": "star"},
            "meta": "result",
        }
        if eager.has_interval:
            marker["error_y"] = {
                "type": "data",
                "symmetric": False,
                "array": [eager.ci_high - eager.ratio],
                "arrayminus": [eager.ratio - eager.ci_low],
            }
        data.append(marker)
    layout = _layout(
        "Speedup per turn (>1 is faster)",
        xaxis={"title": {"text": "turn"}, "dtick": 1},
        yaxis={"title": {"text": "speedup (x)"}},
        shapes=[
            {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1, "line": {"dash": "dash", "width": 1}}
        ],
    )
    return {"data": data, "layout": layout}


def _quartiles(values: list[float]) -> tuple[float, float] | None:
    values = sorted(v for v in values if isinstance(v, (int, float)))
    if len(values) < 4:
        return None

    def at(q: float) -> float:
        pos = q * (len(values) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(values) - 1)
        return values[lo] + (values[hi] - values[lo]) * (pos - lo)

    return at(0.25), at(0.75)


def _spread_of(timing: dict[str, Any], key: str, stats: dict[str, Any]) -> tuple[float, float] | None:
    """The interquartile range of one callable's times: over the paired rounds' block medians
    (schema 2, timing.rounds), else over its samples (an older result's samples_ms), else none.
    Never min..max: one slow outlier call would dwarf the bars."""
    rounds = timing.get("rounds") or []
    values = [r.get(f"{key}_ms") for r in rounds if isinstance(r, dict)]
    iqr = _quartiles([v for v in values if v is not None])
    if iqr is None:
        iqr = _quartiles(list(stats.get("samples_ms") or []))
    return iqr


def best_vs_baselines(evaluation: dict[str, Any] | None) -> dict[str, Any] | None:
    timing = (evaluation or {}).get("timing") or {}
    bars = [
        (label, key, timing.get(key))
        for label, key in (("eager", "eager"), ("torch.compile", "compile"), ("best candidate", "candidate"))
    ]
    bars = [(label, key, s) for label, key, s in bars if isinstance(s, dict) and s.get("median_ms") is not None]
    if not bars:
        return None
    spreads = [_spread_of(timing, key, s) for _, key, s in bars]
    bar: dict[str, Any] = {
        "type": "bar",
        "x": [label for label, _, _ in bars],
        "y": [s["median_ms"] for _, _, s in bars],
        "hovertext": [
            f"median {s['median_ms']:.4g} ms, min {s.get('min_ms', 0):.4g}, max {s.get('max_ms', 0):.4g}, {s.get('trials', '?')} runs"
            + (f"; quartiles {iqr[0]:.4g}..{iqr[1]:.4g}" if iqr else "")
            for (_, _, s), iqr in zip(bars, spreads, strict=True)
        ],
        "hoverinfo": "text",
    }
    if any(spreads):
        bar["error_y"] = {
            "type": "data",
            "symmetric": False,
            "array": [
                max(0.0, iqr[1] - s["median_ms"]) if iqr else 0 for (_, _, s), iqr in zip(bars, spreads, strict=True)
            ],
            "arrayminus": [
                max(0.0, s["median_ms"] - iqr[0]) if iqr else 0 for (_, _, s), iqr in zip(bars, spreads, strict=True)
            ],
        }
    whiskers = "whiskers: interquartile range over the rounds" if any(spreads) else "no whiskers: no per-round times"
    speed = (evaluation or {}).get("speed")
    # plotly reads a few tags in titles: the verdict (the sandbox's words) goes in as plain text
    verdict = _plain(speed.get("verdict") or "")[:90] if isinstance(speed, dict) else ""
    note = f"median ms, {whiskers}; clock {_plain(timing.get('clock') or '?')}" + (f"<br>{verdict}" if verdict else "")
    layout = _layout(
        "Best candidate vs baselines",
        yaxis={"title": {"text": "median (ms)"}},
        xaxis={"title": {"text": note, "font": {"size": 11}}},
    )
    return {"data": [bar], "layout": layout}


def time_per_kernel(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    rows = [r for r in rows or [] if isinstance(r, dict) and (r.get("total_ms") or 0) > 0]
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r.get("total_ms", 0.0))[-20:]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "y": [_plain(r.get("name") or "?", 40) for r in rows],
            "x": [r.get("total_ms", 0.0) for r in rows],
            "hovertext": [f"{r.get('calls', 0)} calls, {100 * r.get('share', 0.0):.1f}%" for r in rows],
        }
    ]
    return {
        "data": data,
        "layout": _layout(
            "Time per kernel of the best candidate", xaxis={"title": {"text": "ms"}}, yaxis={"automargin": True}
        ),
    }


def flop_rate_unit(peak_tflops: float) -> tuple[str, float]:
    """TFLOP/s for a GPU, GFLOP/s when the peak is below one TFLOP/s (a CPU): (unit, FLOP/s per unit)."""
    return ("TFLOP/s", 1e12) if peak_tflops >= 1 else ("GFLOP/s", 1e9)


def roofline(roof: dict[str, Any] | None, evaluation: dict[str, Any] | None) -> dict[str, Any] | None:
    roof = roof or {}
    flops, nbytes = float(roof.get("flops") or 0), float(roof.get("min_bytes") or 0)
    bw, peak = float(roof.get("peak_bandwidth_gbs") or 0), float(roof.get("peak_tflops") or 0)
    if not (flops > 0 and nbytes > 0 and bw > 0 and peak > 0):
        return None
    unit, per_unit = flop_rate_unit(peak)
    peak_rate = peak * 1e12 / per_unit  # in `unit`
    intensity = flops / nbytes
    ridge = peak * 1e3 / bw  # FLOP/byte where the roofs meet (TFLOP/s vs GB/s)
    xs = [min(intensity, ridge) / 100, ridge, max(intensity, ridge) * 100]
    roof_y = [min(peak_rate, x * bw * 1e9 / per_unit) for x in xs]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"roof ({_num(bw)} GB/s, {_num(peak_rate)} {unit}, measured)",
            "x": xs,
            "y": roof_y,
        }
    ]
    timing = (evaluation or {}).get("timing") or {}
    for label, key in (("eager", "eager"), ("torch.compile", "compile"), ("best candidate", "candidate")):
        stats = timing.get(key)
        if isinstance(stats, dict) and stats.get("median_ms"):
            achieved = flops / (stats["median_ms"] * 1e-3) / per_unit
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{label} ({_num(achieved)} {unit})",
                    "x": [intensity],
                    "y": [achieved],
                    "marker": {"size": 12},
                }
            )
    layout = _layout(
        f"Roofline on {_plain(roof.get('device') or 'the device')} ({_plain(roof.get('bound') or '?')}-bound)",
        xaxis={**LOG_AXIS, "title": {"text": "arithmetic intensity (FLOP/byte)"}},
        yaxis={**LOG_AXIS, "title": {"text": unit}},
        # four legend rows below the axis title
        height=460,
        margin={"l": 60, "r": 20, "t": 40, "b": 150},
        legend={"orientation": "h", "y": -0.3, "yanchor": "top"},
    )
    return {"data": data, "layout": layout}


def _num(value: float) -> str:
    """3 significant digits without an exponent for the sizes a roofline has: 4,150 or 0.0123."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


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


def kernels_note(job: Job, rows: list[dict[str, Any]]) -> str:
    """Why there is no time-per-kernel chart, in words."""
    if job.best_version is None:
        return "Time per kernel: no verified candidate, so nothing was profiled."
    if not rows:
        return f"Time per kernel: the best candidate (version {job.best_version}) was not profiled."
    return "Time per kernel: the profiler recorded no time in the best candidate's kernels."


def job_charts(job: Job, turns: list[Turn]) -> dict[str, Any]:
    """`turns` need only their summary columns (events may be deferred). A chart that cannot be
    drawn once something was timed says why under "notes" (chart name -> text)."""
    rows, roof = best_profile(job)
    charts = {
        "speedup": speedup_over_turns(turns, job.result()),
        "baselines": best_vs_baselines(job.best_evaluation),
        "kernels": time_per_kernel(rows),
        "roofline": roofline(roof, job.best_evaluation),
    }
    out: dict[str, Any] = {k: v for k, v in charts.items() if v is not None}
    if out and "kernels" not in out:
        out["notes"] = {"kernels": kernels_note(job, rows)}
    return out
