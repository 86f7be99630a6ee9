"""run_job: the agent loop in this process (standing in for the agent worker), the real compile
and gpu workers behind the Celery evaluator, the scripted OpenAI-compatible server as the model.
Turns must be stored as they complete, announced, resumable after a lost worker."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import User

from agent.testing.scenarios import call, candidate, reply, write_all
from agent.testing.scripted_server import ScriptedServer
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.notifications import group_name
from webapp.jobs.run import runner

TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()


@pytest.fixture
def owner(transactional_db):
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def model_server(settings):
    server = ScriptedServer({"replies": [], "when_exhausted": "error"}).start()
    settings.OPENAI_BASE_URL = server.url
    settings.OPENAI_API_KEY = "sk-scripted"
    settings.KERNELWRIGHT_MODEL = "scripted-model"
    try:
        yield server
    finally:
        server.stop()


def first_turns() -> list[dict]:
    files = candidate("cpu")
    return [
        reply(call("read_file", path="reference.py"), content="Reading the task first."),
        reply(*write_all(files), content="A fused kernel."),
    ]


def last_turns() -> list[dict]:
    return [reply(call("compile")), reply(call("evaluate")), reply(call("finish", summary="fused row softmax kernel"))]


def new_job(owner, max_turns: int = 8) -> Job:
    return services.create_job(
        owner, "softmax", TASK, {"backend": "cpu", "policy": "openai", "max_turns": max_turns}, enqueue=False
    )


class Listener(threading.Thread):
    """Receives the job group's notices while the job runs, in one event loop of its own (the
    layer's receive buffers belong to one loop): a notice expires after 60 s in the channel layer,
    and a whole job takes longer than that on a loaded machine."""

    def __init__(self, layer, channel) -> None:
        super().__init__(name="listener", daemon=True)
        self.layer, self.channel, self.notes, self.done = layer, channel, [], threading.Event()

    def run(self) -> None:
        async def listen():
            while True:
                try:
                    self.notes.append(await asyncio.wait_for(self.layer.receive(self.channel), 0.5))
                except TimeoutError:
                    if self.done.is_set():
                        return  # stopped, and nothing more came for half a second

        asyncio.run(listen())

    def stop(self) -> list[dict]:
        self.done.set()
        self.join(timeout=30)
        return self.notes


@pytest.mark.slow
def test_a_job_runs_through_the_real_queues_and_stores_every_turn(live_workers, model_server, owner):
    model_server.set_script({"replies": first_turns() + last_turns(), "when_exhausted": "error"})
    job = new_job(owner)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(job.pk), channel)
    listener = Listener(layer, channel)
    listener.start()

    runner.run_job(job.pk)

    notes = listener.stop()
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.reason
    turns = {t.index: t for t in job.turns.all()}
    assert sorted(turns) == [0, 1, 2, 3, 4, 5]
    assert turns[0].events[0]["type"] == "task"
    assert any(e["type"] == "compile_result" and e["result"]["ok"] for e in turns[3].events)
    assert turns[4].evaluation["status"] == "ok" and turns[4].reward >= 1 and turns[4].improved
    assert turns[5].events[-1]["type"] == "finished"
    assert job.best_reward == turns[4].reward and job.best_evaluation["backend"] == "cpu"
    assert {a.path for a in job.artifacts.all()} == set(candidate("cpu"))
    ready = [n["turn"] for n in notes if n["type"] == "turn.ready"]
    assert ready[:6] == [0, 1, 2, 3, 4, 5]  # each turn announced once stored, in order
    steps = [n["step"] for n in notes if n["type"] == "job.step"]
    assert any(s.startswith("checking correctness ") and "/" in s for s in steps), steps  # relayed from the gpu worker
    assert "turn 4: evaluating" in steps
    assert notes[-1]["type"] == "job.state" and notes[-1]["state"] == "succeeded"


@pytest.mark.slow
def test_a_job_resumes_from_its_stored_turns_after_a_lost_worker(live_workers, model_server, owner):
    # A first worker ran turns 0-2, stored them, then died (the broker redelivers the task).
    model_server.set_script({"replies": first_turns(), "when_exhausted": "error"})
    job = new_job(owner, max_turns=2)
    runner.run_job(job.pk)
    job.refresh_from_db()
    kept = {t.index: t.events for t in job.turns.all()}
    assert sorted(kept) == [0, 1, 2]
    kept[2] = [e for e in kept[2] if e["type"] not in ("error", "finished")]  # as if it died before the end
    job.turns.filter(index=2).update(events=kept[2])
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.RUNNING, finished_at=None, reason="", options={**job.options, "max_turns": 8}
    )

    model_server.set_script({"replies": last_turns(), "when_exhausted": "error"})
    runner.run_job(job.pk)

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.reason
    assert job.attempts == 2
    turns = {t.index: t.events for t in job.turns.all()}
    assert sorted(turns) == [0, 1, 2, 3, 4, 5]
    assert turns[0] == kept[0] and turns[1] == kept[1] and turns[2] == kept[2]  # stored turns are never rewritten
    assert [e["type"] for e in turns[0]].count("task") == 1
    assert any(e["type"] == "evaluation" and e["result"]["status"] == "ok" for e in turns[4])
    # the resumed policy saw the earlier turns: its first request carries the written kernel
    first_request = model_server.requests[0]
    assert "softmax" in str(first_request["messages"])


def test_a_job_lost_too_often_fails_with_a_reason(owner):
    job = new_job(owner)
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING, attempts=runner.MAX_ATTEMPTS)
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert (
        job.state == Job.State.FAILED and job.reason == "the worker running this job died 3 times; the job was stopped"
    )


def test_a_cancelled_job_is_not_started(owner):
    job = new_job(owner)
    Job.objects.filter(pk=job.pk).update(cancel_requested=True)
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED and job.attempts == 0


def test_finished_jobs_are_left_alone(owner):
    job = new_job(owner)
    services.finish_job(job, Job.State.SUCCEEDED, "done")
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED and job.attempts == 0


@pytest.mark.slow
def test_a_job_asking_for_auto_runs_on_the_backend_its_gpu_worker_resolves(live_workers, model_server, owner):
    # The gpu worker of the stack runs with KERNELWRIGHT_BACKEND=cpu: "auto" is that worker's
    # answer, not this (agent-side) process's guess, and the job shows it once known.
    model_server.set_script({"replies": [reply(call("finish", summary="nothing to do"))], "when_exhausted": "error"})
    job = services.create_job(
        owner, "softmax", TASK, {"backend": "auto", "policy": "openai", "max_turns": 2}, enqueue=False
    )
    runner.run_job(job.pk)

    job.refresh_from_db()
    assert job.options["backend"] == "cpu" and job.options["requested_backend"] == "auto", job.reason
    task_event = job.turns.get(index=0).events[0]
    assert task_event["type"] == "task" and task_event["backend"] == "cpu"
    assert task_event["options"]["backend"] == "cpu"  # what the builds and evaluations are sent with
    again = services.retry_job(job)
    assert again.options["backend"] == "auto"  # a retry asks its own gpu workers again
