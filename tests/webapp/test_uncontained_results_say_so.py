"""A result evaluated without the sandbox (KERNELWRIGHT_UNCONTAINED=1) says so on the job page
and in the API; a sandboxed one carries no such warning (docs/security.md, fail closed)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs.importer import import_trajectory
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.django_db
UNCONTAINED = "uncontained (KERNELWRIGHT_UNCONTAINED=1: untrusted code ran without a sandbox)"


def _job_with_containment(owner: User, labels: list[str]):
    data = build(turns=len(labels))
    evaluations = [e for e in data["events"] if e["type"] == "evaluation"]
    for event, label in zip(evaluations, labels, strict=False):
        event["result"]["containment"] = label
    return import_trajectory(owner, data)


@pytest.fixture
def owner() -> User:
    return User.objects.create_user("owner", password="pw-owner-123")


def test_an_uncontained_evaluation_is_labelled_on_the_turn_and_in_the_api(owner):
    job = _job_with_containment(owner, ["bubblewrap", UNCONTAINED])
    c = Client()
    c.force_login(owner)
    first = c.get(f"/jobs/{job.id}/turns/1/html").content.decode()
    second = c.get(f"/jobs/{job.id}/turns/2/html").content.decode()
    assert "not sandboxed" not in first
    assert "not sandboxed" in second and "KERNELWRIGHT_UNCONTAINED=1" in second
    turn = c.get(f"/api/jobs/{job.id}/turns/2").json()
    labels = [e["result"].get("containment") for e in turn["events"] if e["type"] == "evaluation"]
    assert UNCONTAINED in labels
