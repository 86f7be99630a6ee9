"""Bulk export of jobs as training data: GET /api/export and the export page (webapp.jobs.views.export)."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.export import DATASET_SCHEMA
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import ApiToken, Job
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def other():
    return User.objects.create_user("other", password="pw-other-123")


def token_client(user) -> Client:
    _, key = ApiToken.issue(user, "test")
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def job_of(user, name: str, turns: int = 3, visibility: str = "private") -> Job:
    job = import_trajectory(user, build(turns, name))
    Job.objects.filter(pk=job.pk).update(visibility=visibility, name=name)
    return Job.objects.get(pk=job.pk)


def rows_of(resp) -> list[dict]:
    assert resp.status_code == 200, resp.content[:300]
    return [json.loads(line) for line in resp.content.decode().splitlines()]


def test_it_exports_only_jobs_the_caller_may_see(owner, other):
    mine = job_of(owner, "mine softmax")
    theirs_private = job_of(other, "their private")
    theirs_public = job_of(other, "their public", visibility="public")
    rows = rows_of(token_client(owner).get("/api/export?format=sft"))
    assert {r["run"]["job"] for r in rows} == {mine.pk, theirs_public.pk}
    assert theirs_private.pk not in {r["run"]["job"] for r in rows}
    assert all(r["schema"] == DATASET_SCHEMA and r["messages"][0]["role"] == "system" for r in rows)
    anonymous = rows_of(Client().get("/api/export?format=sft"))
    assert [r["run"]["job"] for r in anonymous] == [theirs_public.pk]
    assert {r["run"]["job"] for r in rows_of(token_client(owner).get("/api/export?mine=1"))} == {mine.pk}


def test_it_filters_by_task_reward_date_and_visibility(owner):
    a = job_of(owner, "row softmax", turns=3)
    b = job_of(owner, "layer norm", turns=2, visibility="public")
    api = token_client(owner)
    rl = rows_of(api.get("/api/export?format=rl&task=softmax"))
    assert {r["run"]["job"] for r in rl} == {a.pk} and [r["step"] for r in rl] == [1, 2, 3]
    assert rl[2]["reward"] == -1 and rl[2]["evaluation"]["status"] == "compile_error"
    assert {r["run"]["job"] for r in rows_of(api.get("/api/export?visibility=public"))} == {b.pk}
    best = {j.pk: j.best_reward for j in Job.objects.all()}
    top = max(best.values())
    assert {r["run"]["job"] for r in rows_of(api.get(f"/api/export?min_reward={top}"))} == {
        pk for pk, r in best.items() if r >= top
    }
    assert rows_of(api.get("/api/export?since=2999-01-01")) == []
    today = a.created_at.date().isoformat()
    assert len(rows_of(api.get(f"/api/export?since={today}&until={today}"))) == 2


def test_it_explains_bad_filters(owner):
    api = token_client(owner)
    for query, words in [
        ("format=csv", "format must be"),
        ("min_reward=lots", "min_reward must be an integer"),
        ("since=yesterday", "ISO date"),
        ("visibility=secret", "visibility must be"),
        ("file=xlsx", "file must be"),
    ]:
        resp = api.get(f"/api/export?{query}")
        assert resp.status_code == 400 and words in resp.json()["error"], query


def test_it_refuses_more_jobs_than_one_file_holds(owner, settings):
    settings.KERNELWRIGHT_EXPORT_MAX_JOBS = 1
    job_of(owner, "a")
    job_of(owner, "b")
    resp = token_client(owner).get("/api/export")
    assert resp.status_code == 400 and "narrow the filters" in resp.json()["error"]


def test_parquet_export_reads_back(owner):
    pq = pytest.importorskip("pyarrow.parquet")
    job = job_of(owner, "row softmax")
    resp = token_client(owner).get("/api/export?format=rl&file=parquet")
    assert resp.status_code == 200 and resp["X-Kernelwright-Rows"] == "3"
    table = pq.read_table(io.BytesIO(resp.content))
    assert table.column("step").to_pylist() == [1, 2, 3]
    assert table.to_pylist()[0]["run"]["job"] == job.pk


def test_the_page_downloads_a_file_and_needs_a_login(owner, other):
    job_of(other, "their private")
    mine = job_of(owner, "mine")
    assert Client().get("/jobs/export/").status_code == 302
    browser = Client()
    browser.force_login(owner)
    page = browser.get("/jobs/export/")
    assert page.status_code == 200 and b'id="export-form"' in page.content
    resp = browser.get("/jobs/export/?download=1&format=sft&file=jsonl")
    assert resp["Content-Disposition"] == 'attachment; filename="kernelwright-sft.jsonl"'
    assert [r["run"]["job"] for r in rows_of(resp)] == [mine.pk]
    bad = browser.get("/jobs/export/?download=1&min_reward=x")
    assert bad.status_code == 400 and b"min_reward must be an integer" in bad.content
