"""A module upload end to end in headless Chromium against the live stack (daphne, Redis, real
Celery workers, CPU backend, built-in policy): upload a file that is not a KernelBench task, pick
its class, give constructor arguments and inputs, and watch the job run to its end on the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.support.browser import screenshot_path
from tests.webapp.test_e2e_job_page_end import TERMINAL_JS, mark_page, same_document
from tests.webapp.test_e2e_jobs import PASSWORD, log_in
from webapp.jobs.models import Job
from webapp.jobs.module_wrapper import WRAPPER_MARK

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SE_FILE = Path(__file__).parent / "data" / "se_block_module.py"


def test_a_module_upload_runs_as_a_kernelbench_task(live_asgi_server, browser_page, transactional_db):
    base, page = live_asgi_server.url, browser_page
    User.objects.create_user("frank", password=PASSWORD)
    log_in(page, base, "frank")
    page.goto(f"{base}/jobs/new/")
    page.set_input_files("#id_file", str(SE_FILE))
    page.wait_for_selector("#module-pick:not([hidden])", timeout=15000)
    page.select_option("#id_module_class", "SEBlock")
    page.fill("#id_init_args", "[16]")
    page.fill("#id_input_specs", "float32[4,16,8,8]")
    page.wait_for_selector("#live-check li.ok >> text=SEBlock as a KernelBench task", timeout=15000)
    page.select_option("select[name=backend]", "cpu")
    page.select_option("select[name=policy]", "builtin")
    page.fill("input[name=max_turns]", "2")  # turn 1 reads and plans, turn 2 writes and evaluates
    assert page.locator("#submit-job").is_enabled(), page.locator("#live-check").inner_text()
    page.wait_for_function(
        "!document.getElementById('new-job-form').dataset.checking && !document.getElementById('submit-job').disabled"
    )
    # (no screenshot here: Chromium restores the scroll position a screenshot moved while the
    # click is under way, and the click lands beside the button)
    with page.expect_navigation(timeout=30000):
        page.click("#submit-job")
    assert page.locator("#server-errors li").count() == 0, page.locator("#server-errors").inner_text()
    assert re.search(r"/jobs/\d+/$", page.url), page.url
    job = Job.objects.get(owner__username="frank")
    assert job.name == "SEBlock" and WRAPPER_MARK in job.source
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=15000)
    mark_page(page)
    page.wait_for_function(TERMINAL_JS, timeout=600_000)
    page.wait_for_selector("#cancel-job", state="detached", timeout=15000)
    job.refresh_from_db()
    assert same_document(page)
    assert page.locator("#job-state").inner_text() == job.state
    # the sandbox ran the wrapped module: the task loaded and was evaluated (timed or judged),
    # not refused as a task
    assert page.locator("article.turn .ev-task").first.inner_text().startswith("Task SEBlock")
    evaluated = page.locator("article.turn .ev-eval")
    assert evaluated.count() >= 1, page.locator("#turns").inner_text()[:3000]
    assert "Model" not in (job.reason or "") or job.state == Job.State.SUCCEEDED, job.reason
    if job.state == Job.State.SUCCEEDED:
        page.wait_for_selector("#download-zip", timeout=15000)
    else:
        page.wait_for_selector("#retry-job", timeout=15000)
    page.screenshot(path=str(screenshot_path("job-module-ended")), full_page=False)


def test_a_pt2_upload_runs_from_the_file_alone(live_asgi_server, browser_page, transactional_db, tmp_path):
    """An ExportedProgram (.pt2) through the form, real workers: the task comes from the file, the
    sandbox loads it, and the page follows the job to its end."""
    from agent.exported_task import EXPORTED_MARK
    from tests.agent.test_cli_modules import export_small_model

    exported = tmp_path / "features.pt2"
    export_small_model(exported, tokens=False)
    base, page = live_asgi_server.url, browser_page
    User.objects.create_user("greta", password=PASSWORD)
    log_in(page, base, "greta")
    page.goto(f"{base}/jobs/new/")
    page.set_input_files("#id_file", str(exported))
    page.wait_for_selector("#live-check li.ok", timeout=15000)
    assert "x: float32[4,6,16]" in page.locator("#live-check").inner_text()
    page.select_option("select[name=backend]", "cpu")
    page.select_option("select[name=policy]", "builtin")
    page.fill("input[name=max_turns]", "2")
    page.wait_for_function(
        "!document.getElementById('new-job-form').dataset.checking && !document.getElementById('submit-job').disabled"
    )
    with page.expect_navigation(timeout=30000):
        page.click("#submit-job")
    assert re.search(r"/jobs/\d+/$", page.url), page.url
    job = Job.objects.get(owner__username="greta")
    assert job.name == "features" and EXPORTED_MARK in job.source
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=15000)
    mark_page(page)
    page.wait_for_function(TERMINAL_JS, timeout=600_000)
    job.refresh_from_db()
    assert same_document(page) and page.locator("#job-state").inner_text() == job.state
    evaluated = page.locator("article.turn .ev-eval")
    assert evaluated.count() >= 1, page.locator("#turns").inner_text()[:3000]
    # the sandbox loaded the program and judged a candidate against it (no "task: ..." refusal)
    results = [t.evaluation for t in job.turns.all() if t.evaluation]
    assert results and not any(r.startswith("task") for e in results for r in e.get("reasons", [])), results[:1]
    page.screenshot(path=str(screenshot_path("job-pt2-ended")), full_page=False)
