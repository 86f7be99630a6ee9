"""Who sees what: owner, another user, an anonymous visitor, a share link, staff; every page and
API endpoint of a job answers the same way (webapp.jobs.permissions)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs import services
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import ApiToken, Job
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.django_db

READ_PAGES = [
    "/jobs/{id}/",
    "/jobs/{id}/updates/?since=-1",
    "/jobs/{id}/turns/1/html",
    "/jobs/{id}/download/best.zip",
    "/jobs/{id}/download/trajectory.json",
    "/jobs/{id}/download/files/model_new.py",
]
READ_API = [
    "/api/jobs/{id}",
    "/api/jobs/{id}/turns?since=-1",
    "/api/jobs/{id}/turns/1",
    "/api/jobs/{id}/progress",
    "/api/jobs/{id}/artifacts",
    "/api/jobs/{id}/artifacts/best.zip",
    "/api/jobs/{id}/artifacts/files/model_new.py",
    "/api/jobs/{id}/trajectory",
]
CHANGE_PAGES = [
    "/jobs/{id}/cancel/",
    "/jobs/{id}/retry/",
    "/jobs/{id}/visibility/",
    "/jobs/{id}/share/",
    "/jobs/{id}/share/revoke/",
]


@pytest.fixture
def owner():
    return User.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def other():
    return User.objects.create_user("other", password="pw-other-123")


@pytest.fixture
def job(owner) -> Job:
    job = import_trajectory(owner, build(turns=3))
    job.origin = Job.Origin.RUN
    job.save()
    return job


def client_for(user) -> Client:
    c = Client()
    if user is not None:
        c.force_login(user)
    return c


@pytest.mark.parametrize("path", READ_PAGES + READ_API)
def test_the_owner_reads_every_page_and_endpoint(job, owner, path):
    assert client_for(owner).get(path.format(id=job.pk)).status_code == 200


@pytest.mark.parametrize("path", READ_PAGES + READ_API)
def test_it_rejects_other_users(job, other, path):
    assert client_for(other).get(path.format(id=job.pk)).status_code == 404


@pytest.mark.parametrize("path", READ_PAGES)
def test_anonymous_visitors_are_sent_to_log_in(job, path):
    resp = client_for(None).get(path.format(id=job.pk))
    assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("path", READ_API)
def test_anonymous_api_calls_get_401(job, path):
    assert client_for(None).get(path.format(id=job.pk)).status_code == 401


@pytest.mark.parametrize("path", READ_PAGES + READ_API)
def test_a_share_link_opens_everything_read_only(job, path):
    token = services.create_share_link(job)
    sep = "&" if "?" in path else "?"
    url = path.format(id=job.pk) + f"{sep}share={token}"
    assert client_for(None).get(url).status_code == 200
    services.revoke_share_link(job)
    assert client_for(None).get(url).status_code in (401, 404)


@pytest.mark.parametrize("path", READ_PAGES + READ_API)
def test_a_wrong_share_token_opens_nothing(job, other, path):
    services.create_share_link(job)
    sep = "&" if "?" in path else "?"
    assert client_for(other).get(path.format(id=job.pk) + f"{sep}share=guess").status_code == 404


@pytest.mark.parametrize("path", READ_PAGES + READ_API)
def test_public_jobs_are_readable_by_anyone(job, path):
    services.set_visibility(job, "public")
    assert client_for(None).get(path.format(id=job.pk)).status_code == 200


@pytest.mark.parametrize("path", READ_PAGES + READ_API)
def test_staff_read_every_job(job, path):
    staff = User.objects.create_user("staff", password="pw-staff-123", is_staff=True)
    assert client_for(staff).get(path.format(id=job.pk)).status_code == 200


@pytest.mark.parametrize("path", CHANGE_PAGES)
def test_only_the_owner_changes_a_job(job, other, path):
    url = path.format(id=job.pk)
    token = services.create_share_link(job)
    services.set_visibility(job, "public")
    assert client_for(other).post(url, {"visibility": "private"}).status_code == 404
    assert client_for(None).post(url + f"?share={token}", {"visibility": "private"}).status_code == 302  # to log in
    job.refresh_from_db()
    assert job.visibility == "public" and job.share_token == token and job.state == Job.State.SUCCEEDED


def test_share_token_does_not_allow_changes(job):
    token = services.create_share_link(job)
    resp = client_for(None).post(f"/jobs/{job.pk}/share/revoke/?share={token}")
    assert resp["Location"].startswith("/accounts/login/")
    job.refresh_from_db()
    assert job.share_token == token


def test_the_job_list_shows_only_own_jobs(job, other):
    mine = client_for(other).get("/").content.decode()
    assert job.name not in mine
    assert job.name in client_for(job.owner).get("/").content.decode()


def test_api_lists_only_own_jobs_and_cancel_needs_ownership(job, other):
    _, key = ApiToken.issue(other)
    c = Client(HTTP_AUTHORIZATION=f"Token {key}")
    assert c.get("/api/jobs").json() == {"jobs": []}
    assert c.post(f"/api/jobs/{job.pk}/cancel").status_code == 404


def test_gallery_jobs_are_open_to_everyone(owner):
    job = import_trajectory(None, build(turns=2), origin=Job.Origin.GALLERY, gallery=True)
    assert client_for(None).get(f"/jobs/{job.pk}/").status_code == 200
    assert client_for(None).get(f"/api/jobs/{job.pk}/turns", {"since": 0}).status_code == 200
    assert client_for(owner).get(f"/api/jobs/{job.pk}/turns", {"since": 0}).status_code == 200
