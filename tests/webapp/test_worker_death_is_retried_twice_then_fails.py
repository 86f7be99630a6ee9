"""A task whose worker process dies under it is run at most MAX_DELIVERIES (3) times, then fails
with a clear reason, instead of Redis handing it back forever (acks_late + reject_on_worker_lost).

The first tests use a real worker of a queue of its own, loaded with test-only tasks that
SIGKILL their own pool process (tests/webapp/worker_death_tasks.py). The others send the real
job and evaluation tasks to the session's workers with the delivery count already at the limit:
what they do instead of running again.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.contrib.auth.models import User

from tests.support.processes import ManagedProcess, wait_for
from tests.webapp import worker_death_tasks as deaths
from webapp.celery import app
from webapp.queues import DELIVERY_KEY, MAX_DELIVERIES, worker_died_reason

pytestmark = pytest.mark.slow
TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()


@pytest.fixture(scope="module")
def dying_worker(live_stack_env, redis_url, tmp_path_factory):
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "webapp.celery:app",
        "worker",
        "-Q",
        deaths.QUEUE,
        "-n",
        "deaths@%h",
        "-c",
        "1",
        "-I",
        "tests.webapp.worker_death_tasks",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]
    proc = ManagedProcess.start("worker-deaths", argv, live_stack_env, tmp_path_factory.mktemp("deaths"))

    def answers() -> bool:
        if not proc.alive:
            raise RuntimeError(f"the worker exited:\n{proc.log_tail()}")
        with app.connection_for_write(url=redis_url) as conn:
            replies = app.control.inspect(timeout=0.5, connection=conn).ping() or {}
        return any(name.startswith("deaths@") for name in replies)

    try:
        wait_for(answers, 90, interval=0.5, what="the test worker")
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def raw_redis(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def send(name: str, runs_key: str, survive_on_run: int):
    return app.send_task(name, args=[runs_key, survive_on_run], queue=deaths.QUEUE)


def runs(client: redis.Redis, key: str) -> list[int]:
    return [int(p) for p in client.lrange(key, 0, -1)]


def test_the_limit_is_a_first_run_and_two_more() -> None:
    assert MAX_DELIVERIES == 3


def test_a_task_that_kills_its_worker_every_time_runs_three_times_then_fails(dying_worker, raw_redis) -> None:
    key = f"kwtest:runs:{uuid.uuid4().hex}"
    result = send("kwtest.deaths.die_until", key, survive_on_run=99)

    with pytest.raises(Exception) as failure:
        result.get(timeout=120, propagate=True)

    assert type(failure.value).__name__ == "WorkerDiedTooOften"
    assert str(failure.value) == "the worker running this task died 3 times; the task was stopped"
    assert result.state == "FAILURE"
    pids = runs(raw_redis, key)
    assert len(pids) == MAX_DELIVERIES and len(set(pids)) == MAX_DELIVERIES  # three pool processes, each killed
    assert dying_worker.alive  # the worker itself lives on, and serves the next task
    assert raw_redis.get(DELIVERY_KEY.format(task_id=result.id, retries=0)) is None  # nothing left behind
    assert "not run again" in wait_for(
        lambda: (t := dying_worker.log_tail(20000)) and "not run again" in t and t, 10, what="the worker's log line"
    )


def test_a_task_whose_worker_died_twice_still_gets_its_third_run(dying_worker, raw_redis) -> None:
    key = f"kwtest:runs:{uuid.uuid4().hex}"
    result = send("kwtest.deaths.die_until", key, survive_on_run=3)

    assert result.get(timeout=120) == "survived run 3"
    assert len(runs(raw_redis, key)) == 3


def test_a_task_can_say_what_it_returns_when_stopped(dying_worker, raw_redis) -> None:
    key = f"kwtest:runs:{uuid.uuid4().hex}"
    result = send("kwtest.deaths.die_until_with_hook", key, survive_on_run=99)

    assert result.get(timeout=120) == {
        "stopped": "the worker running this test task died 3 times; the test task was stopped"
    }
    assert len(runs(raw_redis, key)) == MAX_DELIVERIES


def at_the_limit(client: redis.Redis) -> str:
    """A task id whose delivery count says its worker already died MAX_DELIVERIES times."""
    task_id = uuid.uuid4().hex
    client.set(DELIVERY_KEY.format(task_id=task_id, retries=0), MAX_DELIVERIES, ex=600)
    return task_id


def test_an_evaluation_whose_worker_kept_dying_is_an_error_result_for_the_agent(live_workers, raw_redis) -> None:
    from sandbox.schema import EvalResult, Status, Verdict

    task_id = at_the_limit(raw_redis)
    data = app.send_task(
        "kernelwright.gpu.evaluate", task_id=task_id, kwargs={"task_source": "never run", "files": {}, "options": {}}
    ).get(timeout=60)

    result = EvalResult.from_dict(data)  # as the agent loop's tools rebuild what CeleryEvaluator hands them
    assert (result.status, result.verdict) == (Status.RUNTIME_ERROR, Verdict.FAIL)
    assert result.reasons == [worker_died_reason("evaluation")]
    assert result.reasons[0] == "the worker running this evaluation died 3 times; the evaluation was stopped"


def test_a_build_whose_worker_kept_dying_is_a_failed_build(live_workers, raw_redis) -> None:
    task_id = at_the_limit(raw_redis)
    data = app.send_task("kernelwright.compile.build", task_id=task_id, kwargs={"files": {}, "options": {}}).get(
        timeout=60
    )
    assert data["ok"] is False and data["log"] == worker_died_reason("build")


def test_a_job_whose_worker_kept_dying_fails_with_the_reason(live_workers, raw_redis, transactional_db) -> None:
    from webapp.jobs import services
    from webapp.jobs.models import Job

    owner = User.objects.create_user("died-owner", password="pw-died-123")
    job = services.create_job(owner, "softmax", TASK, {"backend": "cpu"}, enqueue=False)
    task_id = at_the_limit(raw_redis)
    app.send_task("kernelwright.agent.run_job", args=[job.pk], task_id=task_id)

    def failed() -> Job | None:
        job.refresh_from_db()
        return job if job.state == Job.State.FAILED else None

    wait_for(failed, 60, what="the job to fail")
    assert job.reason == "the worker running this job died 3 times; the job was stopped"
    assert job.attempts == 0  # never started again
