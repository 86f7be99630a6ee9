"""Jobs per hour against the number of gpu workers: `python -m benchmarks.pool_bench --workers 1 2`.

Why: the pool is worth its hosts only if throughput grows with the number of gpu workers. For each
worker count N the bench starts N real `gpu` Celery workers (the cpu backend, or one per GPU pinned
with CUDA_VISIBLE_DEVICES on `--backend cuda`) and one `compile` worker, on a Redis database of its
own and a fresh migrated SQLite database, then runs `--jobs` synthetic jobs at once. A synthetic job
is what an agent run sends to the pool without the model's thinking time: for each of
`--evals-per-job` new candidates, a build on the compile queue, then an evaluation on the gpu queue,
through the web app's own CeleryEvaluator, one after the other. It prints a table and writes JSON
(`--out`), including which worker ran each evaluation and whether any two overlapped on one worker
or GPU (they must not).

What the number means: jobs per hour of pool work for this workload (a small row softmax, quick
evaluation options). A real job also waits on the model between turns; while it does, other jobs'
evaluations use the GPU, so many concurrent jobs approach this number and few jobs fall below it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandbox.workloads import softmax_candidate

ROOT = Path(__file__).resolve().parent.parent

# The workload's task: the row softmax the agent's scripted runs use (KernelBench format),
# small enough for quick CPU runs.
TASK_SOURCE = (ROOT / "agent" / "testing" / "fixtures" / "tasks" / "row_softmax_small.py").read_text()


def quick_options(backend: str, cache_dir: str) -> dict[str, Any]:
    """Evaluation options for pool measurements: the real protocol, fewer trials and timed calls."""
    return {
        "backend": backend,
        "preset": "kernelbench",
        "compile_baseline": False,
        "correctness_trials": 1,
        "timing_budget_s": 0.05,
        "min_timed_calls": 5,
        "warmup_calls": 1,
        "input_sets": 1,
        "cache_dir": cache_dir,
        "eval_timeout_s": 300,
    }


# --- the bench -----------------------------------------------------------------------------------


@dataclass
class Row:
    workers: int
    jobs: int
    evals_per_job: int
    wall_s: float
    jobs_per_hour: float
    evals_per_hour: float
    eval_median_s: float  # median evaluation task time on its worker
    kernel_median_ms: float  # median of the correct candidates' measured median time: with N workers
    #                          it must match 1 worker's, or the workers disturb each other's timing
    per_worker: dict[str, int]  # evaluations each worker ran
    gpu_of_worker: dict[str, str]  # CUDA_VISIBLE_DEVICES of each worker ("" on cpu)
    devices_of_worker: dict[str, list[str]]  # the device ids its evaluations reported: one GPU UUID each
    evals_per_gpu: int  # each gpu worker's concurrency (-c): evaluations it may run at once
    timing_cpus: dict[str, int]  # --timing-cpus: each GPU's timing CPU (sandbox.placement); {} when not pinned
    eager_median_ms: float  # median of the eager baselines the evaluations compared with
    sharing_violations: int  # evaluations that overlapped on one worker or GPU beyond evals_per_gpu: must be 0
    timing_overlaps: int  # pairs of timed loops that overlapped on one device (sandbox.devlock): must be 0
    incorrect: int  # evaluations whose verdict was not the expected one: must be 0
    runs: list[dict[str, Any]] = field(default_factory=list)


class Pool:
    """N gpu workers and one compile worker as subprocesses, each in its own process group."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, node: str, queue: str, extra_env: dict[str, str], concurrency: int = 1) -> None:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "webapp.celery:app",
            "worker",
            "-Q",
            queue,
            "-n",
            f"{node}@%h",
            "-c",
            str(concurrency),
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
        ]
        with open(self.log_dir / f"{node}.log", "wb") as log:
            self.procs[node] = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=self.env | extra_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        for node, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.log_dir / f"{node}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"worker {node} exited with {proc.returncode}:\n{tail}")

    def stop(self) -> None:
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.procs.clear()


def gpu_ids() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [v.strip() for v in visible.split(",") if v.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def make_app(redis_url: str):
    from celery import Celery

    app = Celery("kernelwright-pool-bench", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(broker_url=redis_url, result_backend=redis_url, include=[])
    return app


def run_one(n: int, args: argparse.Namespace, env: dict[str, str], app, log_dir: Path, round_no: int) -> Row:
    from sandbox.devlock import overlapping_windows
    from sandbox.schema import CompileResult, EvalResult, Status
    from webapp.jobs.run.sender import CeleryEvaluator
    from webapp.pool import sharing_violations, task_runs, wait_for_workers

    pool = Pool(env, log_dir)
    ids = gpu_ids() if args.backend == "cuda" else []
    if args.backend == "cuda" and len(ids) < n:
        raise SystemExit(f"--workers {n} on cuda needs {n} GPUs; this host shows {len(ids)}")
    lock = threading.Lock()
    cpus_before = os.sched_getaffinity(0)
    plan = None
    if args.timing_cpus and args.backend == "cuda":
        from sandbox.placement import timing_plan

        # as `./kw run` does: this process (so every worker it starts) off the timing CPUs
        plan = timing_plan(ids[:n])
        if plan is None:
            raise SystemExit("--timing-cpus: too few CPUs on this host")
        os.sched_setaffinity(0, plan.others)
        print(f"[pool_bench] {plan.describe()}", flush=True)
    try:
        pool.start("compile", "compile", {"KERNELWRIGHT_BACKEND": args.backend}, concurrency=args.compile_concurrency)
        for i in range(n):
            pin = {"CUDA_VISIBLE_DEVICES": ids[i]} if args.backend == "cuda" else {}
            if plan is not None:
                pin["KERNELWRIGHT_TIMING_CPU"] = str(plan.timing_cpu[ids[i]])
            pool.start(f"gpu{i}", "gpu", {"KERNELWRIGHT_BACKEND": args.backend, **pin}, concurrency=args.evals_per_gpu)
        wait_for_workers(["compile", *[f"gpu{i}" for i in range(n)]], app=app, timeout=180, alive=pool.check_alive)
        options = quick_options(args.backend, args.cache_dir)
        # Warm each worker (its sandbox zygote imports torch once per process), off the clock.
        from webapp.pool import evaluate_batch

        warm = softmax_candidate(10_000 * round_no, args.backend)
        CeleryEvaluator(app=app).compile(TASK_SOURCE, warm, options)
        evaluate_batch(TASK_SOURCE, [warm] * (2 * n * args.evals_per_gpu), options, app=app, timeout=600)

        errors: list[BaseException] = []
        verdicts: list[bool] = []
        kernel_ms: list[float] = []
        results: list[dict[str, Any]] = []

        def job(j: int) -> None:
            evaluator = CeleryEvaluator(app=app, timeouts={"compile": 600, "evaluate": 600})
            try:
                for k in range(args.evals_per_job):
                    correct = k % 3 != 2  # every third candidate is wrong, as agents' candidates often are
                    files = softmax_candidate(10_000 * round_no + 100 * (j + 1) + k, args.backend, correct)
                    built = CompileResult.from_dict(evaluator.compile(TASK_SOURCE, files, options))
                    data = evaluator.evaluate(TASK_SOURCE, files, options)  # the JSON the gpu worker sent
                    res = EvalResult.from_dict(data)
                    with lock:
                        results.append(data)
                        verdicts.append(built.ok and (res.status == Status.OK) == correct)
                        if res.status == Status.OK and res.timing.candidate is not None:
                            kernel_ms.append(res.timing.candidate.median_ms)
            except BaseException as exc:  # reported after the join
                errors.append(exc)

        _sent_ids(app).clear()
        began = time.monotonic()
        threads = [threading.Thread(target=job, args=(j,), name=f"job{j}") for j in range(args.jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - began
        if errors:
            raise errors[0]
        runs = [r for r in task_runs(list(_sent_ids(app)), app=app) if r is not None]
        per_worker: dict[str, int] = {}
        gpu_of: dict[str, str] = {}
        devices_of: dict[str, set[str]] = {}
        for r in runs:
            per_worker[r.node] = per_worker.get(r.node, 0) + 1
            gpu_of[r.node] = r.cuda_visible_devices
            devices_of.setdefault(r.node, set()).add(r.device_id)
        times = sorted(r.seconds for r in runs if r.seconds is not None)
        total_evals = args.jobs * args.evals_per_job
        origin = min((r.started for r in runs), default=0.0)
        return Row(
            workers=n,
            jobs=args.jobs,
            evals_per_job=args.evals_per_job,
            wall_s=round(wall, 2),
            jobs_per_hour=round(args.jobs / wall * 3600, 1),
            evals_per_hour=round(total_evals / wall * 3600, 1),
            eval_median_s=round(times[len(times) // 2], 3) if times else 0.0,
            kernel_median_ms=_median(kernel_ms),
            per_worker=per_worker,
            gpu_of_worker=gpu_of,
            devices_of_worker={k: sorted(v) for k, v in devices_of.items()},
            evals_per_gpu=args.evals_per_gpu,
            sharing_violations=len(sharing_violations(runs, per_device=args.evals_per_gpu)),
            timing_overlaps=len(overlapping_windows(results)),
            timing_cpus=dict(plan.timing_cpu) if plan else {},
            eager_median_ms=_median(
                [r["timing"]["eager"]["median_ms"] for r in results if (r.get("timing") or {}).get("eager")]
            ),
            incorrect=sum(1 for ok in verdicts if not ok),
            runs=[
                {
                    "worker": r.worker,
                    "cuda_visible_devices": r.cuda_visible_devices,
                    "device_id": r.device_id,
                    "start_s": round(r.started - origin, 3),
                    "end_s": round(r.finished - origin, 3) if r.finished else None,
                }
                for r in runs
            ],
        )
    finally:
        pool.stop()
        os.sched_setaffinity(0, cpus_before)


def _median(xs: list[float]) -> float:
    return round(sorted(xs)[len(xs) // 2], 5) if xs else 0.0


_SENT: dict[int, list[str]] = {}


def _sent_ids(app) -> list[str]:
    """Ids of the gpu evaluations this process published through `app` (after_task_publish)."""
    return _SENT.setdefault(id(app), [])


def _watch_publishes(app) -> None:
    from celery.signals import after_task_publish

    def on_publish(sender: str | None = None, headers: dict | None = None, **_: Any) -> None:
        if sender == "kernelwright.gpu.evaluate" and headers and headers.get("id"):
            _sent_ids(app).append(headers["id"])

    after_task_publish.connect(on_publish, weak=False)


BENCH_LOCK_KEY = "kernelwright:pool-bench"


def claim_empty_db(explicit: str | None, base: str):
    """An empty Redis database for the bench (the queues of a running app or of a test session
    must not see its tasks): `explicit` if given and empty, else the highest-numbered empty one."""
    import redis

    candidates = [explicit] if explicit else [base.rsplit("/", 1)[0] + f"/{db}" for db in range(15, 0, -1)]
    for url in candidates:
        client = redis.Redis.from_url(url)
        try:
            took = client.set(BENCH_LOCK_KEY, str(os.getpid()), nx=True, ex=6 * 3600)
        except redis.ResponseError:  # the server has fewer databases
            continue
        if took and client.dbsize() == 1:
            return url, client
        if took:
            client.delete(BENCH_LOCK_KEY)
    raise SystemExit(f"no empty Redis database for the bench (tried {candidates[0]} ...): pass --redis-url")


def table(rows: list[Row], backend: str) -> str:
    base = rows[0].jobs_per_hour if rows else 0.0
    lines = [
        f"backend {backend}: {rows[0].jobs if rows else 0} jobs at once, "
        f"{rows[0].evals_per_job if rows else 0} build+evaluate each",
        f"{'gpu workers':>11} {'per gpu':>7} {'pinned':>6} {'wall s':>8} {'jobs/h':>8} {'evals/h':>8} "
        f"{'x vs first':>10} {'eval med s':>10} {'kernel med ms':>13} {'eager med ms':>12} {'evals per worker':<24} "
        f"{'overlaps':>8} {'timed overlaps':>14} {'wrong':>5}",
    ]
    for r in rows:
        spread = ", ".join(f"{k}:{v}" for k, v in sorted(r.per_worker.items()))
        lines.append(
            f"{r.workers:>11} {r.evals_per_gpu:>7} {'yes' if r.timing_cpus else 'no':>6} {r.wall_s:>8.1f} "
            f"{r.jobs_per_hour:>8.1f} {r.evals_per_hour:>8.1f} {(r.jobs_per_hour / base if base else 0):>10.2f} "
            f"{r.eval_median_s:>10.2f} {r.kernel_median_ms:>13.4f} {r.eager_median_ms:>12.4f} {spread:<24} "
            f"{r.sharing_violations:>8} {r.timing_overlaps:>14} {r.incorrect:>5}"
        )
    devices = sorted(
        {f"{node}={','.join(d[:12] for d in ids)}" for r in rows for node, ids in r.devices_of_worker.items()}
    )
    lines.append("devices the evaluations reported: " + "  ".join(devices))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="gpu worker counts to measure")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--jobs", type=int, default=None, help="concurrent jobs (default: 2 x the largest worker count)"
    )
    parser.add_argument("--evals-per-job", type=int, default=3)
    parser.add_argument(
        "--timing-cpus",
        action="store_true",
        help="cuda: give each GPU a timing CPU and keep every worker off it, as `./kw run` does",
    )
    parser.add_argument(
        "--compile-concurrency",
        type=int,
        default=max(1, min(4, os.cpu_count() or 1)),
        help="the compile worker's concurrency (default as `./kw run`)",
    )
    parser.add_argument(
        "--evals-per-gpu",
        type=int,
        default=1,
        help="each gpu worker's concurrency, as `./kw run --evals-per-gpu` (timed loops stay exclusive)",
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help="an EMPTY Redis database for the bench, flushed afterwards "
        "(default: the highest empty database of REDIS_URL's server)",
    )
    parser.add_argument("--out", default=str(ROOT / "artifacts" / "gpu-pool" / "pool_bench.json"))
    args = parser.parse_args(argv)
    args.jobs = args.jobs or 2 * max(args.workers)

    base = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    redis_url, client = claim_empty_db(args.redis_url, base)

    work = Path(tempfile.mkdtemp(prefix="kw-pool-bench-"))
    args.cache_dir = str(work / "cache")
    database = f"sqlite:///{work / 'bench.sqlite3'}"
    env = os.environ.copy() | {
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DATABASE_URL": database,
        "REDIS_URL": redis_url,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    # Workers and this process must agree on the settings; load them after pointing at the bench's stores.
    os.environ.update({"DATABASE_URL": database, "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "webapp.settings"})
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    app = make_app(redis_url)
    _watch_publishes(app)
    rows: list[Row] = []
    try:
        for round_no, n in enumerate(args.workers, start=1):
            print(
                f"[pool_bench] {n} gpu worker(s), {args.jobs} jobs x {args.evals_per_job} evaluations ...", flush=True
            )
            log_dir = work / f"logs-{n}"
            log_dir.mkdir(parents=True, exist_ok=True)
            rows.append(run_one(n, args, env, app, log_dir, round_no))
    finally:
        client.flushdb()
    text = table(rows, args.backend)
    print(text)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_cores": os.cpu_count(),
        "backend": args.backend,
        "gpus": gpu_ids() if args.backend == "cuda" else [],
        "command": "python -m benchmarks.pool_bench " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**meta, "table": text, "rows": [asdict(r) for r in rows]}, indent=2))
    print(f"[pool_bench] wrote {out}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r.sharing_violations == 0 and r.timing_overlaps == 0 and r.incorrect == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
