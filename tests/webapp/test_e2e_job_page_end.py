"""The end of a job on a page left open, in headless Chromium against the live stack (daphne,
Redis, Celery workers): without a reload the header shows the final state and the best result,
Cancel goes away, Download (a verified candidate) or Retry (a failed run) appear.

test_the_page_follows_a_job_to_its_end, test_a_failed_job_offers_retry_without_a_reload: turns
stored and the job finished by the services a worker uses (quick and deterministic).
test_a_real_run_ends_on_an_open_page: the real agent worker, built-in policy, CPU backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.support.browser import screenshot_path
from tests.webapp.test_e2e_jobs import PASSWORD, log_in
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
from webapp.jobs.turns import group_by_turn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TASK_FILE = Path(__file__).parent / "data" / "row_softmax_small.py"
TERMINAL_JS = "['succeeded', 'failed', 'cancelled'].includes(document.getElementById('job-state').textContent)"


def mark_page(page) -> None:
    """A marker that a reload would wipe: the assertions below hold for the same document."""
    page.evaluate("window.__sameDocument = 1")


def same_document(page) -> bool:
    return page.evaluate("window.__sameDocument === 1")


def open_running_job(server, page, username: str) -> Job:
    """A running job (no worker runs it: the test stores its turns) open in the page, live."""
    owner = User.objects.create_user(username, password=PASSWORD)
    job = services.start_job(
        services.create_job(owner, f"{username}'s softmax", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    )
    log_in(page, server.url, username)
    page.goto(f"{server.url}/jobs/{job.pk}/")
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=15000)
    mark_page(page)
    return job


def test_the_page_follows_a_job_to_its_end(live_asgi_server, browser_page, transactional_db):
    page = browser_page
    job = open_running_job(live_asgi_server, page, "carol")
    turns = group_by_turn(build(turns=4)["events"])
    assert page.locator("#cancel-job").is_visible()
    assert page.locator("#job-best").inner_text() == "best: no verified candidate"
    assert page.locator("#download-zip").count() == 0 and not page.locator("#best-card").is_visible()

    services.store_turn(job, 0, turns[0])
    services.store_turn(job, 1, turns[1])
    # The best result updates live, before the end.
    page.wait_for_function("document.getElementById('job-best').textContent.includes('vs eager')", timeout=15000)
    assert page.locator("#download-zip").is_visible() and page.locator("#cancel-job").is_visible()
    for index in (2, 3, 4):
        services.store_turn(job, index, turns[index])
    page.wait_for_selector("#turn-4", timeout=15000)
    services.finish_job(job, Job.State.SUCCEEDED, "the policy finished")
    page.wait_for_function(TERMINAL_JS, timeout=15000)
    page.wait_for_selector("#cancel-job", state="detached", timeout=15000)

    job.refresh_from_db()
    assert same_document(page)
    assert page.locator("#job-state").inner_text() == "succeeded"
    best = page.locator("#job-best").inner_text()
    assert f"reward {job.best_reward}" in best and job.result().text() in best, best
    assert page.locator("#download-zip").is_visible()
    assert page.locator("#best-card").is_visible()
    assert f"Best candidate (version {job.best_version})" in page.locator("#best-card").inner_text()
    assert page.locator("#job-step").inner_text() == ""
    assert page.locator("#job-elapsed").inner_text().endswith("s")
    assert page.locator("#job-reason").inner_text() == "the policy finished"
    page.screenshot(path=str(screenshot_path("job-ended-live")), full_page=False)


def test_a_failed_job_offers_retry_without_a_reload(live_asgi_server, browser_page, transactional_db):
    page = browser_page
    job = open_running_job(live_asgi_server, page, "dave")
    assert page.locator("#retry-job").count() == 0
    services.finish_job(job, Job.State.FAILED, "no correct candidate found: the shapes do not match")
    page.wait_for_selector("#retry-job", timeout=15000)
    assert same_document(page)
    assert page.locator("#cancel-job").count() == 0 and page.locator("#download-zip").count() == 0
    assert page.locator("#job-state").inner_text() == "failed"
    assert page.locator("#job-reason").inner_text() == "no correct candidate found: the shapes do not match"
    assert page.locator("#job-best").inner_text() == "best: no verified candidate"


def test_a_real_run_ends_on_an_open_page(live_asgi_server, browser_page, transactional_db, tmp_path):
    base, page = live_asgi_server.url, browser_page
    User.objects.create_user("erin", password=PASSWORD)
    log_in(page, base, "erin")
    page.goto(f"{base}/jobs/new/")
    page.fill("#id_source", TASK_FILE.read_text())
    page.wait_for_selector("#live-check li.ok >> text=parses", timeout=15000)
    page.select_option("select[name=backend]", "cpu")
    page.select_option("select[name=policy]", "builtin")
    page.fill("input[name=max_turns]", "2")
    page.click("#submit-job")
    page.wait_for_url(f"{base}/jobs/*/", timeout=15000)
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=15000)
    mark_page(page)
    page.wait_for_function(TERMINAL_JS, timeout=600_000)
    page.wait_for_selector("#cancel-job", state="detached", timeout=15000)
    job = Job.objects.get(owner__username="erin")
    assert job.state == Job.State.SUCCEEDED, job.reason
    assert same_document(page)
    page.wait_for_selector("#download-zip", timeout=15000)
    best = page.locator("#job-best").inner_text()
    assert f"reward {job.best_reward}" in best and "vs eager" in best, best
    assert page.locator("article.turn").count() == job.turns.count()
    page.screenshot(path=str(screenshot_path("job-real-ended-live")), full_page=False)
