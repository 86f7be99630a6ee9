"""services: the writes that push to clients (save first, announce after commit)."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import User

from webapp.jobs import services
from webapp.jobs.importer import ImportRefused, import_trajectory
from webapp.jobs.models import Job
from webapp.jobs.notifications import group_name
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
from webapp.jobs.turns import group_by_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return User.objects.create_user("owner", password="pw-owner-123")


def make_job(owner, **kw) -> Job:
    return services.create_job(owner, "softmax", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False, **kw)


def test_it_creates_a_job_with_normalized_options(owner):
    job = make_job(owner)
    assert job.state == Job.State.QUEUED
    assert job.options == {
        "backend": "cpu",
        "policy": "builtin",
        "preset": "default",
        "torch_ops": "forbid",
        "precision": "task",
        "max_turns": 10,
    }
    assert len(job.task_hash) == 64


@pytest.mark.parametrize(
    "source,message",
    [
        ("def get_inputs(): pass\ndef get_init_inputs(): pass\n", "class Model"),
        ("class Model:\n    def forward(self, x): return x\n", "get_inputs"),
        ("class Model(:\n", "Syntax error"),
        ("", "empty"),
    ],
)
def test_it_rejects_invalid_sources(owner, source, message):
    with pytest.raises(services.InvalidJob) as exc:
        services.create_job(owner, "x", source, {}, enqueue=False)
    assert message in str(exc.value)


def test_it_rejects_bad_options(owner):
    with pytest.raises(services.InvalidJob) as exc:
        services.create_job(owner, "x", SOFTMAX_TASK, {"backend": "tpu", "max_turns": 0}, enqueue=False)
    assert "backend" in str(exc.value) and "max_turns" in str(exc.value)


def test_it_never_imports_the_source(owner, tmp_path):
    marker = tmp_path / "imported"
    source = SOFTMAX_TASK + f"\nopen({str(marker)!r}, 'w').write('x')\n"
    make_job(owner).delete()
    services.create_job(owner, "x", source, {}, enqueue=False)
    assert not marker.exists()


def test_store_turn_summarises_and_updates_the_best(owner):
    job = make_job(owner)
    turns = group_by_turn(build(turns=5)["events"])
    for index, events in turns.items():
        services.store_turn(job, index, events)
    job.refresh_from_db()
    stored = {t.index: t for t in job.turns.all()}
    assert sorted(stored) == [0, 1, 2, 3, 4, 5]
    assert stored[2].reward == -1 and stored[2].has_error
    assert stored[3].has_error and stored[3].evaluation["status"] == "compile_error"
    assert stored[1].improved and not stored[2].improved
    assert stored[5].prompt_tokens == 1005
    assert job.best_version == 5 and job.best_reward == 3
    assert job.best_evaluation["status"] == "ok"
    assert {a.path for a in job.artifacts.all()} == {"model_new.py", "kernels/softmax.cpp"}


def test_a_run_whose_best_failed_its_confirmation_leaves_the_job_without_a_best(owner):
    job = make_job(owner)
    events = build(turns=5)["events"]
    finished = next(e for e in events if e["type"] == "finished")
    finished.update(best_version=None, best_reward=None, speedup_vs_eager=None, speedup_vs_compile=None)
    for index, turn_events in group_by_turn(events).items():
        services.store_turn(job, index, turn_events)
    job.refresh_from_db()
    assert job.best_version is None and job.best_reward is None and job.best_evaluation is None
    assert not job.artifacts.exists()


def test_store_turn_is_idempotent_per_index(owner):
    job = make_job(owner)
    events = group_by_turn(build(turns=1)["events"])[1]
    services.store_turn(job, 1, events)
    services.store_turn(job, 1, events[:2])
    assert job.turns.count() == 1
    assert len(job.turns.get().events) == 2


def _listen(job_id: int):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group_name(job_id), channel)
    return layer, channel


def _drain(layer, channel, wait: float = 0.5) -> list[dict]:
    """Every message that arrives until none came for `wait` seconds."""

    async def drain():
        out = []
        while True:
            try:
                out.append(await asyncio.wait_for(layer.receive(channel), wait))
            except TimeoutError:
                return out

    return async_to_sync(drain)()


@pytest.mark.django_db(transaction=True)
def test_store_turn_announces_after_the_commit(owner):
    job = make_job(owner)
    layer, channel = _listen(job.pk)
    events = group_by_turn(build(turns=1)["events"])[1]
    services.store_turn(job, 1, events)
    messages = [m for m in _drain(layer, channel) if m["job_id"] == job.pk]
    assert [(m["type"], m["turn"]) for m in messages] == [("turn.ready", 1), ("job.charts", 1)]
    assert "events" not in messages[0]  # the turn travels rendered, never as the model's raw events
    note = json.loads(messages[0]["text"])  # what the browser receives
    assert note["turn"] == 1 and 'id="turn-1"' in note["update"]["html"] and note["update"]["last_index"] == 1
    assert "speedup" in json.loads(messages[1]["text"])["charts"]


@pytest.mark.django_db(transaction=True)
def test_set_step_announces_only_changes_of_running_jobs(owner):
    job = make_job(owner)
    layer, channel = _listen(job.pk)
    services.set_step(job.pk, "compiling")  # queued: ignored
    services.start_job(job)
    services.set_step(job.pk, "checking correctness 3/5")
    services.set_step(job.pk, "checking correctness 3/5")
    services.set_step(job.pk, "timing")
    messages = _drain(layer, channel)
    assert [(m["type"], m["state"]) for m in messages if m["type"] == "job.state"] == [("job.state", "running")]
    assert [m["step"] for m in messages if m["type"] == "job.step"] == ["checking correctness 3/5", "timing"]
    job.refresh_from_db()
    assert job.step == "timing"


def test_cancel_a_queued_job_ends_it_and_a_running_one_is_asked_to_stop(owner):
    queued = make_job(owner)
    services.cancel_job(queued)
    assert queued.state == Job.State.CANCELLED and queued.finished_at is not None
    running = services.start_job(make_job(owner))
    services.cancel_job(running)
    assert running.state == Job.State.RUNNING and running.cancel_requested


def test_retry_makes_a_new_job_only_for_failed_or_cancelled(owner):
    job = make_job(owner)
    with pytest.raises(services.InvalidJob):
        services.retry_job(job)
    services.finish_job(job, Job.State.FAILED, "boom")
    new = services.retry_job(job)
    assert (
        new.pk != job.pk and new.source == job.source and new.options == job.options and new.state == Job.State.QUEUED
    )


def test_share_links_are_unguessable_and_revocable(owner):
    job = make_job(owner)
    token = services.create_share_link(job)
    assert len(token) >= 32
    assert services.can_view(None, job, token)
    services.revoke_share_link(job)
    job.refresh_from_db()
    assert job.share_token is None and not services.can_view(None, job, token)


def test_import_builds_a_finished_job_from_a_trajectory(owner):
    data = build(turns=4)
    finished = data["events"][-1]
    job = import_trajectory(owner, data)
    assert job.origin == Job.Origin.IMPORTED and job.state == Job.State.SUCCEEDED
    assert job.turns.count() == 5
    assert (job.best_version, job.best_reward) == (finished["best_version"], finished["best_reward"]) == (4, 2)
    assert "max_turns" in job.reason


@pytest.mark.parametrize(
    "data",
    [{"schema": "other/1", "events": []}, [], {"schema": "kernelwright.trajectory/1", "events": [{"type": "nope"}]}],
)
def test_import_refuses_what_is_not_a_trajectory(owner, data):
    with pytest.raises(ImportRefused):
        import_trajectory(owner, data)
