"""A failed job's header leads with what went wrong, in one line: the policy's closing words or
the failed evaluation's first reason (a traceback cut to its root cause), never the runner's
bare "no correct candidate found (the policy finished)" nor a traceback. The page's HTML and
the live state (which job.js writes into the header) say the same.

The failed jobs hold the turns a run stores (agent.events) and are ended by the runner's own
finish (webapp.jobs.run.runner._finish_from_trajectory), so the stored reason is its generic one;
the evaluation's reason is a real traceback of a module whose inputs do not fit it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.events import EvaluationEvent, Finished, ModelMessage, RewardEvent, TurnStarted
from sandbox.schema import EvalResult, Status, Verdict
from tests.webapp.test_upload_runtime_error import EXPECTED as MISFIT_ERROR
from tests.webapp.test_upload_runtime_error import MISFIT, failure
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.run.runner import _finish_from_trajectory
from webapp.jobs.sample_trajectory import SOFTMAX_TASK
from webapp.jobs.views.pages import failure_reason

pytestmark = pytest.mark.django_db
BUILTIN_SUMMARY = (
    "Not optimised: the forward could not be captured (RuntimeError: mat1 and mat2 shapes cannot be "
    "multiplied (4x16 and 32x8))."
)


def misfit_traceback(tmp_path: Path) -> str:
    """The traceback of calling the module on inputs of the wrong width, as Python prints it."""
    import torch

    path = tmp_path / "task.py"
    path.write_text(MISFIT)
    spec = importlib.util.spec_from_file_location("misfit_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return failure(lambda: module.Head()(torch.randn(4, 16)))


def failed_job(owner, evaluation_reason: str, summary: str = "", stop: str = "model_finished") -> Job:
    """A job whose one candidate failed its evaluation with `evaluation_reason`, ended by the
    policy (`stop`) with `summary` (the loop's default when empty)."""
    job = services.start_job(services.create_job(owner, "misfit head", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False))
    result = EvalResult(status=Status.RUNTIME_ERROR, verdict=Verdict.FAIL, reasons=[evaluation_reason], reward=-1)
    events = [
        TurnStarted(turn=1),
        ModelMessage(turn=1, content="Evaluate the candidate."),
        EvaluationEvent(turn=1, version=1, result=result.to_dict()),
        RewardEvent(turn=1, version=1, reward=-1),
        Finished(turn=1, reason=stop, summary=summary or "no verified candidate"),
    ]
    services.store_turn(job, 1, [e.to_dict() for e in events])
    _finish_from_trajectory(job, None)
    job.refresh_from_db()
    assert job.state == Job.State.FAILED and job.reason.startswith("no correct candidate found ("), job.reason
    return job


@pytest.fixture
def owner():
    return User.objects.create_user("failing", password="pw-failing-123")


@pytest.fixture
def client(owner) -> Client:
    c = Client()
    c.force_login(owner)
    return c


def said(client: Client, job: Job) -> tuple[str, str]:
    """(the header's reason line as rendered, the live state's reason job.js writes there)"""
    html = client.get(f"/jobs/{job.pk}/head/").content.decode()
    line = html.split('id="job-reason"', 1)[1].split(">", 1)[1].split("</p>", 1)[0]
    return line, client.get(f"/jobs/{job.pk}/updates/").json()["live"]["reason"]


def test_the_evaluation_s_traceback_becomes_its_root_cause(client, owner, tmp_path):
    job = failed_job(owner, misfit_traceback(tmp_path))
    assert job.reason == "no correct candidate found (the policy finished)"
    assert said(client, job) == (MISFIT_ERROR, MISFIT_ERROR)


def test_the_policy_s_closing_words_come_first(client, owner, tmp_path):
    job = failed_job(owner, misfit_traceback(tmp_path), summary=BUILTIN_SUMMARY)
    line, live = said(client, job)
    assert (
        line
        == live
        == "Not optimised: the forward could not be captured (RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x16 and 32x8))."
    )


def test_a_budget_that_ended_the_run_is_said_after_the_reason(owner, tmp_path):
    job = failed_job(owner, misfit_traceback(tmp_path), stop="max_turns")
    assert failure_reason(job) == f"{MISFIT_ERROR} (turn budget used up)"


def test_a_stored_traceback_is_one_line_and_a_specific_reason_stays(owner, tmp_path):
    job = services.create_job(owner, "t", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    services.finish_job(job, Job.State.FAILED, misfit_traceback(tmp_path))
    assert failure_reason(job) == MISFIT_ERROR
    services.finish_job(job, Job.State.FAILED, "internal error: OSError: no space left on device")
    assert failure_reason(job) == "internal error: OSError: no space left on device"
    services.finish_job(job, Job.State.FAILED, "no correct candidate found: the shapes do not match", BUILTIN_SUMMARY)
    assert failure_reason(job) == "no correct candidate found: the shapes do not match"
    services.finish_job(job, Job.State.SUCCEEDED, "the policy finished")
    assert failure_reason(job) == "the policy finished"
