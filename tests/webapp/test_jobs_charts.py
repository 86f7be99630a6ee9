"""charts.py on the shapes of evaluation results: error bars, units, what a missing chart says."""

from __future__ import annotations

from webapp.jobs import charts


def stats(median: float, lo: float, hi: float) -> dict:
    return {"median_ms": median, "min_ms": lo, "max_ms": hi, "trials": 100}


def test_error_bars_are_the_rounds_interquartile_range_never_min_max():
    rounds = [
        {"order": ["eager", "candidate"], "eager_ms": e, "candidate_ms": c}
        for e, c in [(1.0, 0.5), (1.1, 0.52), (0.9, 0.48), (1.05, 0.51), (0.95, 0.49)]
    ]
    evaluation = {
        "timing": {
            "eager": stats(1.0, 0.8, 40.0),
            "candidate": stats(0.5, 0.4, 30.0),
            "rounds": rounds,
            "clock": "cuda_events",
        },
        "speed": {"verdict": "2x faster than eager (95% interval 1.9-2.1x, 5 rounds)"},
    }
    fig = charts.best_vs_baselines(evaluation)
    bar = fig["data"][0]
    assert bar["x"] == ["eager", "best candidate"]
    up, down = bar["error_y"]["array"], bar["error_y"]["arrayminus"]
    assert [round(v, 3) for v in up] == [0.05, 0.01] and [round(v, 3) for v in down] == [0.05, 0.01]
    assert "interquartile" in fig["layout"]["xaxis"]["title"]["text"]
    assert "95% interval" in fig["layout"]["xaxis"]["title"]["text"]


def test_no_rounds_no_error_bars():
    fig = charts.best_vs_baselines({"timing": {"eager": stats(1.0, 0.8, 40.0), "candidate": stats(0.5, 0.4, 30.0)}})
    assert "error_y" not in fig["data"][0]
    assert charts.best_vs_baselines({"timing": {"eager": None}}) is None


def test_roofline_units_and_axes():
    roof = {"device": "cpu", "flops": 1e6, "min_bytes": 1e6, "peak_bandwidth_gbs": 20.0, "peak_tflops": 0.045}
    fig = charts.roofline(roof, {"timing": {"candidate": stats(0.1, 0.1, 0.1)}})
    assert fig["data"][0]["name"] == "roof (20 GB/s, 45 GFLOP/s, measured)"
    assert fig["data"][1]["name"] == "best candidate (10 GFLOP/s)"
    assert fig["layout"]["yaxis"]["title"]["text"] == "GFLOP/s" and fig["layout"]["yaxis"]["dtick"] == 1
    assert "width" not in fig["layout"] and fig["layout"]["autosize"] is True
    gpu = charts.roofline({**roof, "peak_tflops": 51.0, "peak_bandwidth_gbs": 4151.6}, None)
    assert gpu["data"][0]["name"] == "roof (4,152 GB/s, 51 TFLOP/s, measured)"


def test_time_per_kernel_leaves_out_zero_rows():
    assert charts.time_per_kernel([{"name": "k", "total_ms": 0.0}]) is None
    fig = charts.time_per_kernel([{"name": "x" * 80, "total_ms": 1.0, "calls": 2, "share": 1.0}])
    assert len(fig["data"][0]["y"][0]) == 40
