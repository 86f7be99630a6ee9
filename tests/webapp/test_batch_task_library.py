"""The task library page (webapp.jobs.views.library): list, search, start a job from a task."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db
TASK = '''"""Row tanh, then a sum."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x).sum(dim=-1)


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''


@pytest.fixture
def browser(settings, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tanh_sum.py").write_text(TASK)
    (tmp_path / "lib" / "broken.py").write_text("class Model(:\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "not_a_task.py").write_text('"""No Model here."""\nx = 1\n')
    settings.KERNELWRIGHT_TASK_LIBRARY = [tmp_path / "lib", tmp_path / "other", tmp_path / "missing"]
    client = Client()
    client.force_login(User.objects.create_user("owner", password="pw-owner-123"))
    return client


def test_it_lists_and_searches_the_library(browser):
    page = browser.get("/tasks/").content.decode()
    assert "tanh_sum" in page and "not_a_task" in page and "broken" not in page  # unparsable files are left out
    assert "Row tanh, then a sum." in page and "sum, tanh" in page  # the docstring and the operators
    found = browser.get("/tasks/?q=tanh").content.decode()
    assert "tanh_sum" in found and "not_a_task" not in found
    assert 'id="library-empty"' in browser.get("/tasks/?q=nothing-like-this").content.decode()


def test_it_starts_a_job_from_a_task(browser):
    resp = browser.post("/tasks/0/tanh_sum/start/", {"backend": "cpu"})
    job = Job.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}/"
    assert job.name == "tanh_sum" and job.source == TASK and job.options["backend"] == "cpu"


def test_a_task_that_is_not_valid_says_why_and_no_job_is_made(browser):
    resp = browser.post("/tasks/1/not_a_task/start/", follow=True)
    assert not Job.objects.exists() and "not_a_task:" in resp.content.decode()


def test_only_listed_tasks_can_be_started(browser):
    assert browser.post("/tasks/0/..%2Fother%2Fnot_a_task/start/").status_code == 404
    assert browser.post("/tasks/7/tanh_sum/start/").status_code == 404
    assert browser.get("/tasks/0/tanh_sum/start/").status_code == 405
    assert Client().get("/tasks/").status_code == 302  # log in first
