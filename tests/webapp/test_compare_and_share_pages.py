"""What the compare page and a dead share link tell a person: no speed ratio between different
tasks, a failed job's side reads "no verified candidate", "no profile" never hides one, and a
revoked share link answers 404 with a page that says it was revoked. Checked in the HTML and,
for what is visible, in headless Chromium (pages rendered by the test client, served by routing).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.test_job_page_renders import ORIGIN, serve
from webapp.jobs import services
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import build

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return User.objects.create_user("truth-owner", password="pw-truth-123")


@pytest.fixture
def client(owner) -> Client:
    c = Client()
    c.force_login(owner)
    return c


def other_task(name: str = "another task") -> dict:
    data = build(turns=1, name=name)
    for e in data["events"]:
        if e["type"] == "task":
            e["source"] = e["source"].replace("def get_inputs", "# another task\ndef get_inputs")
            e["task_hash"] = "another"
    return data


def failed_run() -> dict:
    """A run whose only candidate failed correctness: no best, no artifacts."""
    data = build(turns=2)
    data["events"] = [e for e in data["events"] if e.get("turn", 0) != 1 and e["type"] != "best_changed"]
    for e in data["events"]:
        if e["type"] == "finished":
            e["best_version"] = None
    return data


def test_no_speed_ratio_between_different_tasks(client, owner):
    a = import_trajectory(owner, build(turns=1))
    b = import_trajectory(owner, other_task())
    assert a.task_hash != b.task_hash
    html = client.get("/compare/", {"a": a.pk, "ta": 1, "b": b.pk, "tb": 1}).content.decode()
    assert "not compared: the two sides solve different tasks" in html
    assert "the speed of A" not in html


def test_a_failed_job_has_no_verified_candidate_to_compare(client, owner):
    a = import_trajectory(owner, build(turns=1))
    failed = import_trajectory(owner, failed_run())
    assert failed.best_version is None and failed.state == Job.State.FAILED
    html = client.get("/compare/", {"a": a.pk, "b": failed.pk}).content.decode()
    assert "version None" not in html
    assert "B: <a" in html and "(no verified candidate)" in html


def test_no_profile_says_which_versions_were_profiled():
    import json
    from pathlib import Path

    data = json.loads(
        (Path(__file__).resolve().parents[2] / "webapp/jobs/fixtures/gallery/basic_residual_block.json").read_text()
    )
    job = import_trajectory(None, data, origin=Job.Origin.GALLERY, gallery=True, name="residual")
    html = Client().get("/compare/", {"a": job.pk, "b": job.pk, "tb": 6}).content.decode()
    profiles = html.split('id="compare-profiles"')[1].split("</div>\n</div>")[0]
    side_a, side_b = profiles.split("<h3")[1], profiles.split("<h3")[2]
    # the best (version 4) was not profiled; turn 6 profiled version 7
    assert "no profile of this candidate; profiled: version 7 (turn 6)" in side_a
    assert "no profile" not in side_b and "cudnn_convolution" in side_b


def test_a_revoked_share_link_says_so(client, owner):
    job = import_trajectory(owner, build(turns=1))
    token = services.create_share_link(job)
    services.revoke_share_link(job)
    anon = Client()
    for path in (f"/s/{token}/", f"/jobs/{job.pk}/?share={token}"):
        resp = anon.get(path)
        assert resp.status_code == 404, path
        assert "This share link no longer works" in resp.content.decode() and "revoked" in resp.content.decode()
    # a job the visitor may not see is still a plain 404 without a share token
    assert "This share link" not in Client().get(f"/jobs/{job.pk}/").content.decode()


@pytest.mark.slow
def test_in_the_browser(request, client, owner):
    a = import_trajectory(owner, build(turns=1))
    b = import_trajectory(owner, other_task())
    failed = import_trajectory(owner, failed_run())
    token = services.create_share_link(a)
    services.revoke_share_link(a)
    cmp_tasks = f"/compare/?a={a.pk}&ta=1&b={b.pk}&tb=1"
    cmp_failed = f"/compare/?a={a.pk}&b={failed.pk}"
    pages = {
        cmp_tasks: client.get(cmp_tasks).content,
        cmp_failed: client.get(cmp_failed).content,
        f"/s/{token}/": Client().get(f"/s/{token}/").content,
    }
    page = request.getfixturevalue("browser_page")
    serve(page, pages)
    page.goto(ORIGIN + cmp_tasks)
    assert (
        page.locator("#compare-ratio").inner_text() == "B against A\tnot compared: the two sides solve different tasks"
    )
    assert page.locator("#different-tasks").is_visible()
    page.goto(ORIGIN + cmp_failed)
    head = page.locator("#compare-table thead").inner_text()
    assert "no verified candidate" in head and "None" not in head
    page.goto(ORIGIN + f"/s/{token}/")
    assert page.locator("#share-revoked h1").inner_text() == "This share link no longer works"
    assert "revoked" in page.locator("#share-revoked").inner_text()
