"""`python -m benchmarks.timer_check`: where a candidate's timed milliseconds come from.

For each case (a gallery fixture's best candidate, or the sandbox bench workloads) this prints,
in one process on one device:
- the sandbox's own numbers (`evaluate`: median, and its split into the time between the
  events and the device tail);
- eager and candidate through our Timer and through `triton.testing.do_bench`, in this process
  (the candidate loaded here, outside the sandbox: a diagnostic of trusted generated code only);
- the host cost of one forward (calls issued back to back, one synchronise at the end, divided
  by the calls) and the device cost (profiler kernel time per forward).
A candidate whose host cost exceeds its device cost is host-bound: the sandbox then charges each
call the back-to-back loop's time per call (sandbox/timing.py), which is Python, not its kernel. Numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GALLERY = ROOT / "webapp" / "jobs" / "fixtures" / "gallery"


def fixture_case(name: str, folder: Path = GALLERY) -> tuple[str, dict[str, str]]:
    """(task source, best candidate files) of a trajectory fixture (default: the gallery's)."""
    from agent.trajectory import Trajectory

    traj = Trajectory.from_dict(json.loads((folder / f"{name}.json").read_text()))
    if traj.best() is None or traj.task() is None:
        raise SystemExit(f"{name}: the fixture has no task or no best candidate")
    return traj.task().source, dict(traj.best().files)


def generated_case(task_name: str) -> tuple[str, dict[str, str]]:
    """(task source, the built-in policy's final candidate at the default launch configuration)
    of a suite task (benchmarks/tasks), generated here without the agent loop."""
    from agent.builtin.graph import analyze_source
    from agent.builtin.pipeline import build_candidate
    from agent.builtin.rewrites import all_rewrites

    src = (ROOT / "benchmarks" / "tasks" / f"{task_name}.py").read_text()
    an = analyze_source(src, profile=False)
    if not an.ok:
        raise SystemExit(f"{task_name}: {an.error}")
    rw = all_rewrites(an.graph)
    return src, build_candidate(rw[-1].graph if rw else an.graph, an.data, "cuda").files


def _load(name: str, source: str, where: Path) -> Any:
    from sandbox.harness import load_module_from_source

    path = where / f"{name}.py"
    path.write_text(source)
    return load_module_from_source(name, path)


def host_ms(fn: Any, inputs: list, calls: int = 300) -> float:
    """Host time per call when calls are issued back to back (the device catches up at the end)."""
    import torch

    for _ in range(20):
        fn(*inputs)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*inputs)
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host * 1000.0 / calls


def kwrt_host_ms(kwrt: Any, fn: Any, inputs: list, calls: int = 300) -> dict[str, float]:
    """Host time per forward inside each kernel function call (conversion, ctypes, the C side): every
    kernel's published call (`lib.name`) is wrapped with a timer, and so is any call kwrt publishes
    while this runs (a new signature); the calls as they were are put back at the end."""
    import torch

    spent: dict[str, float] = {}
    lib = kwrt.load()
    original = kwrt._Library._publish
    saved = {name: lib.__dict__[name] for name in lib._kernels}

    def timed_publish(self: Any, name: str, call: Any) -> None:
        def timed(*args: Any) -> None:
            t0 = time.perf_counter()
            try:
                call(*args)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0

        original(self, name, timed)

    kwrt._Library._publish = timed_publish
    for name, call in saved.items():
        timed_publish(lib, name, call)
    try:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    finally:
        kwrt._Library._publish = original
        lib.__dict__.update(saved)
    return {k: v * 1000.0 / calls for k, v in spent.items()}


def device_ms(fn: Any, inputs: list, calls: int = 20) -> float:
    """Kernel time per forward from the profiler (no host time, no gaps)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    total = 0.0
    for evt in prof.events():
        if getattr(evt, "device_type", None) == torch.autograd.DeviceType.CUDA:
            total += evt.time_range.elapsed_us()
    return total / 1000.0 / calls


def check(label: str, task: str, files: dict[str, str]) -> dict:
    import torch
    from triton.testing import do_bench

    from sandbox import evaluate
    from sandbox.build import build
    from sandbox.options import EvalOptions
    from sandbox.timing import Timer

    opts = EvalOptions(
        backend="cuda", cache_dir=os.environ.get("KERNELWRIGHT_CACHE", tempfile.mkdtemp()), timing_budget_s=0.5
    )
    res = evaluate(task, files, opts)
    row: dict[str, Any] = {"case": label, "status": res.status.value}
    c, e = res.timing.candidate, res.timing.eager
    if c is not None and e is not None:
        row.update(
            sandbox_cand=c.median_ms,
            sandbox_event=c.event_median_ms,
            sandbox_tail=c.tail_median_ms,
            sandbox_host=c.host_median_ms,
            sandbox_device=c.device_median_ms,
            sandbox_loop=c.loop_ms,
            sandbox_limited=c.host_limited_calls,
            sandbox_floor=c.sync_floor_ms,
            sandbox_eager=e.median_ms,
            sandbox_eager_event=e.event_median_ms,
        )
    _, artifacts = build(files, opts)
    where = Path(tempfile.mkdtemp(prefix="kw-timercheck-"))
    os.environ["KW_BACKEND"] = "cuda"
    if artifacts.library:
        os.environ["KWRT_LIB"] = artifacts.library
    sys.path.insert(0, str(ROOT / "sandbox" / "runtime"))
    import kwrt

    kwrt._lib = None
    ref = _load(f"ref_{label}", task, where)
    with torch.device("cuda"):
        torch.manual_seed(0)
        model = ref.Model(*ref.get_init_inputs()).eval()
        sets = [list(ref.get_inputs()) for _ in range(3)]
    cand_mod = _load(f"cand_{label}", files["model_new.py"], where)
    with torch.device("cuda"):
        cand = cand_mod.ModelNew(*ref.get_init_inputs())
    cand.load_state_dict(model.state_dict())
    cand = cand.eval().cuda()
    timer = Timer("cuda")

    with torch.no_grad():
        for name, fn in (("eager", model), ("cand", cand)):
            stats, _ = timer.run(fn, sets, 1.0, 20, 2000, 3)
            row[f"{name}_timer"] = stats["median_ms"]
            row[f"{name}_timer_event"] = stats.get("event_median_ms")
            row[f"{name}_timer_host"] = stats.get("host_median_ms")
            row[f"{name}_timer_loop"] = stats.get("loop_ms")
            row[f"{name}_do_bench"] = do_bench(lambda fn=fn: fn(*sets[0]), warmup=25, rep=500, return_mode="median")
            row[f"{name}_host"] = host_ms(fn, sets[0])
            if name == "cand":
                row["cand_kwrt_host"] = kwrt_host_ms(kwrt, fn, sets[0])
            row[f"{name}_device"] = device_ms(fn, sets[0])
        # the profiler leaves CUPTI subscribed in this process: the same timer again shows what that costs
        stats, _ = timer.run(cand, sets, 1.0, 20, 2000, 3)
        row["cand_timer_after_profiler"] = stats["median_ms"]
        row["cand_timer_host_after_profiler"] = stats.get("host_median_ms")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timer_check")
    parser.add_argument(
        "cases", nargs="*", default=["diag_scale_matmul", "rmsnorm_swish", "linear_gelu_residual"], help="fixture names"
    )
    parser.add_argument(
        "--fixtures",
        default=str(GALLERY),
        help="folder of trajectory fixtures (python -m benchmarks.case_studies --out)",
    )
    parser.add_argument("--out", default="")
    parser.add_argument(
        "--ab-unroll",
        nargs="*",
        default=None,
        metavar="TASK",
        help="suite tasks: generate each with kernelgen.ROW_UNROLL 1 and 4 and check both",
    )
    args = parser.parse_args(argv)
    rows = []
    if args.ab_unroll is not None:
        from agent.builtin import kernelgen

        for name in args.ab_unroll:
            for unroll in (1, 4):
                kernelgen.ROW_UNROLL = unroll
                try:
                    task, files = generated_case(name)
                    rows.append(check(f"{name}_u{unroll}", task, files))
                except Exception as exc:  # a diagnostic: report and go on
                    rows.append({"case": f"{name}_u{unroll}", "error": f"{type(exc).__name__}: {exc}"})
                print(json.dumps(rows[-1]), flush=True)
        args.cases = []
    for name in args.cases:
        task, files = fixture_case(name, Path(args.fixtures))
        try:
            rows.append(check(name, task, files))
        except Exception as exc:  # a diagnostic: report and go on with the next case
            rows.append({"case": name, "error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    cols = [
        "sandbox_cand",
        "sandbox_device",
        "sandbox_loop",
        "sandbox_host",
        "sandbox_eager",
        "cand_timer",
        "cand_timer_loop",
        "cand_timer_host",
        "cand_timer_after_profiler",
        "cand_timer_host_after_profiler",
        "cand_do_bench",
        "cand_host",
        "cand_device",
        "eager_timer",
        "eager_do_bench",
        "eager_host",
        "eager_device",
    ]
    print("case".ljust(22) + "".join(c.rjust(15) for c in cols))
    for r in rows:
        print(
            r["case"].ljust(22)
            + "".join((f"{r[c]:.4f}" if isinstance(r.get(c), float) else str(r.get(c, "-"))).rjust(15) for c in cols)
        )
    if rows:
        ok = [r for r in rows if "cand_host" in r]
        if ok:
            bound = [r["case"] for r in ok if r["cand_host"] > r["cand_device"]]
            print("host-bound candidates (host per forward > device per forward): " + (", ".join(bound) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
