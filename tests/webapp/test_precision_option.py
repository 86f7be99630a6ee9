"""The task's precision as a job option: the form offers it, the job records it, the header shows
it, bad values are refused, and the runner hands it to the sandbox (EvalOptions.precision)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sandbox.options import PRECISIONS, SANDBOX_OPTION_KEYS, EvalOptions
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db
TASK = (Path(__file__).parent / "data" / "row_softmax_small.py").read_text()


@pytest.fixture
def client() -> Client:
    c = Client()
    c.force_login(User.objects.create_user("prec", password="pw-prec-123"))
    return c


def test_the_form_offers_every_precision_and_the_job_shows_the_chosen_one(client):
    form = client.get("/jobs/new/").content.decode()
    assert all(f'<option value="{p}"' in form for p in PRECISIONS)
    resp = client.post(
        "/jobs/new/",
        {
            "source": TASK,
            "name": "half",
            "backend": "cpu",
            "policy": "builtin",
            "max_turns": "2",
            "preset": "default",
            "torch_ops": "allow",
            "precision": "bfloat16",
        },
    )
    assert resp.status_code == 302, resp.content.decode()[:500]
    job = Job.objects.get(name="half")
    assert job.options["precision"] == "bfloat16"
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "precision <b>bfloat16</b>" in page
    # what the runner passes on is a valid sandbox option
    opts = {k: job.options[k] for k in SANDBOX_OPTION_KEYS if k in job.options}
    assert EvalOptions.from_dict(opts).precision == "bfloat16"


def test_an_unknown_precision_is_refused_with_the_choices(client):
    resp = client.post(
        "/jobs/new/",
        {"source": TASK, "name": "bad", "backend": "cpu", "policy": "builtin", "max_turns": "2", "precision": "int4"},
    )
    assert (
        resp.status_code == 400 and "precision must be one of task, float32, bfloat16, float16" in resp.content.decode()
    )
    assert not Job.objects.filter(name="bad").exists()
