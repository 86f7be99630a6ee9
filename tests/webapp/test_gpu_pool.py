"""The gpu worker pool: two `gpu` workers (gpu0, gpu1: the cpu backend, concurrency 1 each) and a
`compile` worker, real subprocesses on a Redis database of their own, evaluating candidates of a
small row softmax in the real sandbox through the web app's CeleryEvaluator and tasks.

Shown here: the evaluations of two concurrent jobs spread over both workers, a batch of
candidates of one job runs in parallel and comes back in order, and no two evaluations ever ran
on one worker at the same time (timing must never share a GPU). Each evaluation's worker,
CUDA_VISIBLE_DEVICES, start and end come from the record the worker itself writes (webapp.pool)
and are saved to artifacts/gpu-pool/.

The same tests run on the cuda backend where two GPUs are visible (`-m gpu`; they skip cleanly
elsewhere): gpu0 and gpu1 are then pinned to the first two GPUs with CUDA_VISIBLE_DEVICES, as
`./kw run` pins them, and each record must name its worker's GPU.

Why a Redis database of its own: the session's `live_workers` (gpu0@...) listen on the session
database; they would take some of these evaluations and make "which worker ran it" meaningless.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery
from celery.result import AsyncResult
from celery.signals import after_task_publish
from django.contrib.auth.models import User

from benchmarks.pool_bench import quick_options
from sandbox.cache import files_hash
from sandbox.devlock import overlapping_windows
from sandbox.schema import CompileResult, EvalResult, Status
from sandbox.workloads import softmax_candidate
from tests.support.processes import ROOT
from tests.support.redis_db import claim_redis_db
from tests.support.stack import start_worker
from webapp.jobs import services
from webapp.jobs.run.sender import CeleryEvaluator
from webapp.pool import TaskRun, evaluate_batch, run_table, sharing_violations, task_runs, wait_for_workers
from webapp.queues import EVALUATE_TASK

TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()
GPU_NODES = ("gpu0", "gpu1")
ARTIFACTS = ROOT / "artifacts" / "gpu-pool"


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request) -> str:
    if request.param == "cuda":
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
            pytest.skip("the cuda pool needs two visible GPUs")
    return request.param


@pytest.fixture(scope="module")
def gpu_pins(backend) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of each gpu worker: the first two GPUs on cuda, none on cpu."""
    if backend == "cpu":
        return {node: "" for node in GPU_NODES}
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    ids = visible or [str(i) for i in range(len(GPU_NODES))]
    return dict(zip(GPU_NODES, ids, strict=False))


@pytest.fixture(scope="module")
def gpu_devices(backend, gpu_pins) -> dict[str, str]:
    """The device id each gpu worker's evaluations must report (EvalResult.device_id): "cpu" on
    cpu; on cuda "gpu-<UUID>" of the GPU its CUDA_VISIBLE_DEVICES names, as nvidia-smi lists it
    (read here, independently of the sandbox)."""
    if backend == "cpu":
        return {node: "cpu" for node in GPU_NODES}
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True, text=True, check=True
    ).stdout
    uuid_of = {}
    for line in out.splitlines():
        index, uuid = (part.strip() for part in line.split(",", 1))
        uuid_of[index] = uuid_of[uuid] = "gpu-" + uuid.removeprefix("GPU-")
    return {node: uuid_of[pin] for node, pin in gpu_pins.items()}


@pytest.fixture(scope="module")
def pool_redis_url(redis_url):
    claimed = claim_redis_db(redis_url)
    try:
        yield claimed.url
    finally:
        claimed.release()


@pytest.fixture(scope="module")
def pool_app(pool_redis_url):
    """A client of the pool's Redis database: the project's Celery settings, another broker."""
    app = Celery("kernelwright-pool-test", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(broker_url=pool_redis_url, result_backend=pool_redis_url)
    return app


@pytest.fixture(scope="module")
def pool_workers(backend, gpu_pins, live_stack_env, pool_redis_url, pool_app, tmp_path_factory):
    """gpu0 and gpu1 on the gpu queue and one compile worker, as `./kw run --gpu-workers 2` starts
    them (cpu: KERNELWRIGHT_BACKEND=cpu, no CUDA_VISIBLE_DEVICES; cuda: one GPU each)."""
    env = live_stack_env | {"REDIS_URL": pool_redis_url, "KERNELWRIGHT_BACKEND": backend}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    log_dir = tmp_path_factory.mktemp("pool-workers")
    workers = {}
    try:
        for node in GPU_NODES:
            pin = {"CUDA_VISIBLE_DEVICES": gpu_pins[node]} if gpu_pins[node] else {}
            workers[node] = start_worker("gpu", env | pin, log_dir, node=node)
        workers["compile"] = start_worker("compile", env, log_dir, node="compile")

        def alive() -> None:
            for proc in workers.values():
                if not proc.alive:
                    raise RuntimeError(f"{proc.name} exited ({proc.proc.returncode}):\n{proc.log_tail()}")

        wait_for_workers(workers, app=pool_app, timeout=120, alive=alive)
        yield workers
    finally:
        for proc in workers.values():
            proc.stop()


@pytest.fixture(scope="module")
def options(backend, tmp_path_factory) -> dict:
    return quick_options(backend, str(tmp_path_factory.mktemp("pool-cache")))


@pytest.fixture
def owner(transactional_db):
    return User.objects.create_user("pool-owner", password="pw-pool-owner-123")


@pytest.fixture
def published():
    """Ids of the evaluations this test sends, by the thread that sent them (Celery's own
    after_task_publish signal, fired in the sending thread)."""
    sent: list[tuple[str, str]] = []

    def on_publish(sender=None, headers=None, **_):
        if sender == EVALUATE_TASK:
            sent.append((threading.current_thread().name, headers["id"]))

    after_task_publish.connect(on_publish, weak=False)
    try:
        yield sent
    finally:
        after_task_publish.disconnect(on_publish)


def new_job(owner, name: str, backend: str):
    return services.create_job(owner, name, TASK, {"backend": backend, "max_turns": 3}, enqueue=False)


def save_runs(name: str, runs: list[TaskRun]) -> str:
    table = run_table(runs)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    origin = min(r.started for r in runs)
    (ARTIFACTS / f"{name}.json").write_text(
        json.dumps(
            [
                {
                    "task_id": r.task_id,
                    "worker": r.worker,
                    "cuda_visible_devices": r.cuda_visible_devices,
                    "device_id": r.device_id,
                    "pid": r.pid,
                    "start_s": round(r.started - origin, 3),
                    "end_s": round(r.finished - origin, 3),
                }
                for r in runs
            ],
            indent=2,
        )
    )
    (ARTIFACTS / f"{name}.txt").write_text(table + "\n")
    return table


def check_runs(
    runs: list[TaskRun | None], workers, app, backend: str, gpu_pins: dict[str, str], gpu_devices: dict[str, str]
) -> list[TaskRun]:
    """Every evaluation has a complete record from the worker that Celery says ran it, pinned to
    that worker's GPU (none on cpu), and the evaluation itself reports having run on that GPU."""
    assert all(r is not None for r in runs), "a worker did not record an evaluation"
    for run in runs:
        assert run.finished is not None and run.finished > run.started
        assert run.state == "SUCCESS"
        assert run.node in GPU_NODES
        assert run.cuda_visible_devices == gpu_pins[run.node] and run.backend == backend
        assert run.device_id == gpu_devices[run.node], (run.worker, run.device_id, gpu_devices)
        # The record is the truth about which process ran it: a pool process of that worker...
        assert parent_pid(run.pid) == workers[run.node].proc.pid
        # ...and Celery's own result (result_extended) names the same worker.
        assert AsyncResult(run.task_id, app=app).worker == run.worker
    return runs


def run_at_once(work: dict[str, Callable[[], None]], timeout: float = 600) -> None:
    """Each function in a thread of that name (the published-task record names the thread), all
    at once; an exception in one is raised here, in the test thread."""
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(fn,), name=name) for name, fn in work.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), f"the evaluations did not finish in {timeout:.0f} s"
    assert not errors, errors


def cross_worker_overlaps(runs: list[TaskRun]) -> int:
    return sum(1 for i, a in enumerate(runs) for b in runs[i + 1 :] if a.worker != b.worker and a.overlaps(b))


@pytest.mark.slow
def test_two_jobs_evaluations_spread_over_both_gpu_workers_and_never_share_one(
    backend, gpu_pins, gpu_devices, pool_workers, pool_app, options, owner, published
):
    jobs = [new_job(owner, "softmax A", backend), new_job(owner, "softmax B", backend)]
    # Each job builds and evaluates its own new candidates in turn, as the agent loop does;
    # every third one is wrong, so each verdict also says the result belongs to its candidate.
    streams = {
        job.pk: [(softmax_candidate(1000 * s + k, backend, correct=k != 1), k != 1) for k in range(3)]
        for s, job in enumerate(jobs, start=1)
    }
    results: dict[int, list] = {job.pk: [] for job in jobs}

    def run_job_evaluations(job_id: int) -> None:
        evaluator = CeleryEvaluator(job_id, app=pool_app, timeouts={"compile": 300, "evaluate": 300})
        for files, _ in streams[job_id]:
            built = CompileResult.from_dict(evaluator.compile(TASK, files, options))
            assert built.ok, built.log[-2000:]
            results[job_id].append(EvalResult.from_dict(evaluator.evaluate(TASK, files, options)))

    run_at_once({f"job-{job.pk}": functools.partial(run_job_evaluations, job.pk) for job in jobs})

    for job in jobs:
        got = results[job.pk]
        assert [r.candidate_hash for r in got] == [files_hash(files) for files, _ in streams[job.pk]]
        assert {r.backend for r in got} == {backend}
        assert [r.status for r in got] == [Status.OK if ok else Status.INCORRECT for _, ok in streams[job.pk]], [
            r.reasons for r in got
        ]

    assert len(published) == 6
    ids = [task_id for _, task_id in published]
    runs = check_runs(task_runs(ids, app=pool_app), pool_workers, pool_app, backend, gpu_pins, gpu_devices)
    table = save_runs(f"two-jobs-{backend}", runs)
    print("\n" + table)
    assert {r.node for r in runs} == set(GPU_NODES), f"evaluations did not spread over both workers:\n{table}"
    assert sharing_violations(runs) == [], f"two evaluations overlapped on one worker:\n{table}"
    # The two jobs really ran at the same time: evaluations on different workers overlapped.
    assert cross_worker_overlaps(runs) >= 1, f"no two evaluations ran at once:\n{table}"
    # ... but never their timed loops on one device (the cpu backend's lock is host-wide)
    assert overlapping_windows([r.to_dict() for job in jobs for r in results[job.pk]]) == []
    # Each job's own evaluations ran one after another (the loop waits for each result).
    for job in jobs:
        own = [r for (thread, _), r in zip(published, runs, strict=True) if thread == f"job-{job.pk}"]
        assert len(own) == 3
        assert not any(a.overlaps(b) for i, a in enumerate(own) for b in own[i + 1 :]), table


@pytest.mark.slow
def test_a_batch_of_candidates_is_evaluated_in_parallel_and_returned_in_order(
    backend, gpu_pins, gpu_devices, pool_workers, pool_app, options, owner, published
):
    job = new_job(owner, "softmax batch", backend)
    expected_ok = [True, False, True, True, False]
    candidates = [softmax_candidate(5000 + i, backend, correct=ok) for i, ok in enumerate(expected_ok)]
    evaluator = CeleryEvaluator(job.pk, app=pool_app, timeouts={"compile": 300})
    for files in candidates:
        assert evaluator.compile(TASK, files, options)["ok"]

    batch = evaluate_batch(TASK, candidates, options, job_id=job.pk, app=pool_app, timeout=300)

    assert [r.candidate_hash for r in batch.results] == [files_hash(f) for f in candidates]
    assert [r.status for r in batch.results] == [Status.OK if ok else Status.INCORRECT for ok in expected_ok], [
        r.reasons for r in batch.results
    ]
    assert [task_id for _, task_id in published] == batch.task_ids
    assert {r.backend for r in batch.results} == {backend}
    runs = check_runs(task_runs(batch.task_ids, app=pool_app), pool_workers, pool_app, backend, gpu_pins, gpu_devices)
    table = save_runs(f"batch-{backend}", runs)
    print("\n" + table)
    assert {r.node for r in runs} == set(GPU_NODES), f"the batch did not spread over both workers:\n{table}"
    assert sharing_violations(runs) == [], f"two evaluations overlapped on one worker:\n{table}"
    assert cross_worker_overlaps(runs) >= 1, f"the batch did not run in parallel:\n{table}"
    assert overlapping_windows([r.to_dict() for r in batch.results]) == []


@pytest.mark.slow
def test_two_jobs_and_a_batch_at_once_spread_over_both_gpus_and_never_share_one(
    backend, gpu_pins, gpu_devices, pool_workers, pool_app, options, owner, published
):
    """What a team's pool sees: two agent runs evaluating their candidates one after another while
    a third job sends a batch of candidates, all at the same time."""
    jobs = [new_job(owner, "mixed A", backend), new_job(owner, "mixed B", backend)]
    batch_job = new_job(owner, "mixed batch", backend)
    streams = {job.pk: [softmax_candidate(7000 + 100 * s + k, backend) for k in range(2)] for s, job in enumerate(jobs)}
    batch_candidates = [softmax_candidate(7500 + i, backend, correct=i != 2) for i in range(4)]
    builder = CeleryEvaluator(batch_job.pk, app=pool_app, timeouts={"compile": 300})
    for files in [*batch_candidates, *(f for stream in streams.values() for f in stream)]:
        assert builder.compile(TASK, files, options)["ok"]  # built first: the gpu workers only evaluate
    published.clear()

    results: dict[str, list] = {}

    def one_after_another(job_id: int) -> None:
        evaluator = CeleryEvaluator(job_id, app=pool_app, timeouts={"evaluate": 300})
        results[f"job-{job_id}"] = [
            EvalResult.from_dict(evaluator.evaluate(TASK, files, options)) for files in streams[job_id]
        ]

    def batch() -> None:
        results["batch"] = evaluate_batch(
            TASK, batch_candidates, options, job_id=batch_job.pk, app=pool_app, timeout=300
        ).results

    run_at_once({**{f"job-{job.pk}": functools.partial(one_after_another, job.pk) for job in jobs}, "batch": batch})

    for job in jobs:
        assert [r.status for r in results[f"job-{job.pk}"]] == [Status.OK, Status.OK], [
            r.reasons for r in results[f"job-{job.pk}"]
        ]
    assert [r.status for r in results["batch"]] == [Status.OK, Status.OK, Status.INCORRECT, Status.OK]
    assert [r.candidate_hash for r in results["batch"]] == [files_hash(f) for f in batch_candidates]

    assert len(published) == 8
    runs = check_runs(
        task_runs([task_id for _, task_id in published], app=pool_app),
        pool_workers,
        pool_app,
        backend,
        gpu_pins,
        gpu_devices,
    )
    table = save_runs(f"jobs-and-batch-{backend}", runs)
    print("\n" + table)
    assert {r.node for r in runs} == set(GPU_NODES), f"evaluations did not spread over both workers:\n{table}"
    assert sharing_violations(runs) == [], f"two evaluations overlapped on one worker:\n{table}"
    assert cross_worker_overlaps(runs) >= 1, f"no two evaluations ran at once:\n{table}"
    # the batch's evaluations and the jobs' evaluations interleaved on the pool
    threads_of_node = {r.node: set() for r in runs}
    for (thread, _), r in zip(published, runs, strict=True):
        threads_of_node[r.node].add(thread)
    assert any(len(names) > 1 for names in threads_of_node.values()), table
    assert overlapping_windows([r.to_dict() for rs in results.values() for r in rs]) == []


def run(worker: str, devices: str, start: float, end: float | None) -> TaskRun:
    return TaskRun(
        task_id=f"{worker}-{start}",
        task=EVALUATE_TASK,
        worker=worker,
        cuda_visible_devices=devices,
        backend="cuda",
        pid=1,
        started=start,
        finished=end,
        state="SUCCESS",
    )


def test_overlap_on_one_worker_or_one_gpu_is_a_violation():
    back_to_back = [run("gpu0@h", "0", 0, 1), run("gpu0@h", "0", 1, 2)]
    assert sharing_violations(back_to_back) == []
    same_worker = [run("gpu0@h", "0", 0, 2), run("gpu0@h", "0", 1, 3)]
    assert len(sharing_violations(same_worker)) == 1
    # Two workers pinned to one GPU of one host (a misconfiguration) share it.
    same_gpu = [run("gpu0@h", "0", 0, 2), run("gpu1@h", "0,1", 1, 3)]
    assert len(sharing_violations(same_gpu)) == 1
    # Different GPUs, or GPU 0 of two different hosts, do not.
    assert sharing_violations([run("gpu0@h", "0", 0, 2), run("gpu1@h", "1", 1, 3)]) == []
    assert sharing_violations([run("gpu0@a", "0", 0, 2), run("gpu0@b", "0", 1, 3)]) == []
    # cpu-backend workers (no CUDA_VISIBLE_DEVICES) share only with themselves.
    assert sharing_violations([run("gpu0@h", "", 0, 2), run("gpu1@h", "", 1, 3)]) == []
    # A run that never recorded its end is still running: it overlaps everything after its start.
    assert len(sharing_violations([run("gpu0@h", "0", 0, None), run("gpu0@h", "0", 50, 51)])) == 1


def test_several_evaluations_per_gpu_are_a_violation_only_beyond_the_limit():
    two = [run("gpu0@h", "0", 0, 2), run("gpu0@h", "0", 1, 3)]
    assert sharing_violations(two, per_device=2) == []
    three = two + [run("gpu0@h", "0", 1.5, 4)]
    assert len(sharing_violations(three, per_device=2)) == 1
    # three runs of which no more than two overlap at any moment (Helly: pairwise overlap is the test)
    chain = [run("gpu0@h", "0", 0, 2), run("gpu0@h", "0", 1, 3), run("gpu0@h", "0", 2.5, 4)]
    assert sharing_violations(chain, per_device=2) == []
