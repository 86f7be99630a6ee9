"""End to end in headless Chromium against the live stack (daphne, Redis, Celery workers).

test_turns_stream_live_into_the_job_page: turns stored by the same service a worker uses arrive
in an open page over the websocket, survive a reload, and the step and state update live.
test_a_user_runs_a_job_and_shares_it: the whole product path with a real agent worker: log in,
upload the task, watch turns arrive, see the charts, download the zip, open the share link
logged out. Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.support.browser import screenshot_path
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
from webapp.jobs.turns import group_by_turn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TASK_FILE = Path(__file__).parent / "data" / "row_softmax_small.py"
PASSWORD = "e2e-Password-123"


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{base}/")


def test_turns_stream_live_into_the_job_page(live_asgi_server, browser_page, transactional_db):
    base, page = live_asgi_server.url, browser_page
    owner = User.objects.create_user("alice", password=PASSWORD)
    job = services.start_job(
        services.create_job(owner, "softmax live", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    )
    turns = group_by_turn(build(turns=4)["events"])
    log_in(page, base, "alice")
    page.goto(f"{base}/jobs/{job.pk}/")
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=15000)
    assert page.locator("article.turn").count() == 0

    for index in (0, 1, 2):
        services.store_turn(job, index, turns[index])
    page.wait_for_selector("#turn-2", timeout=15000)
    assert page.locator("#timeline .tick").count() == 3
    services.set_step(job.pk, "checking correctness 3/5")
    page.wait_for_function(
        "document.getElementById('job-step').textContent === 'checking correctness 3/5'", timeout=15000
    )
    # model output stays text: the <script> in the synthetic message is shown, not run
    assert "<script>alert('x')</script>" in page.locator("#turn-1 .ev-msg pre").inner_text()
    page.screenshot(path=str(screenshot_path("job-live")), full_page=True)

    # A turn stored while the page is away arrives after the reload, the rest live.
    page.goto("about:blank")
    services.store_turn(job, 3, turns[3])
    page.goto(f"{base}/jobs/{job.pk}/")
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=15000)
    assert page.locator("#turn-3").count() == 1
    services.store_turn(job, 4, turns[4])
    page.wait_for_selector("#turn-4", timeout=15000)
    page.wait_for_selector("#chart-speedup.drawn .main-svg", timeout=15000)
    services.finish_job(job, Job.State.SUCCEEDED, "the policy finished")
    page.wait_for_function("document.getElementById('job-state').textContent === 'succeeded'", timeout=15000)
    assert page.locator("article.turn").count() == 5

    page.check("#only-errors")
    visible = [i for i in range(5) if page.locator(f"#turn-{i}").is_visible()]
    assert visible == [2, 3]  # incorrect and compile error
    page.uncheck("#only-errors")
    page.goto(f"{base}/jobs/{job.pk}/#turn-3")
    assert page.evaluate("document.querySelector(':target').id") == "turn-3"


def test_a_user_runs_a_job_and_shares_it(live_asgi_server, browser_page, chromium_browser, transactional_db, tmp_path):
    base, page = live_asgi_server.url, browser_page
    User.objects.create_user("bob", password=PASSWORD)
    upload = tmp_path / "row_softmax_small.py"
    shutil.copy(TASK_FILE, upload)

    log_in(page, base, "bob")
    page.goto(f"{base}/jobs/new/")
    page.set_input_files("#id_file", str(upload))
    page.wait_for_selector("#live-check li.ok >> text=parses", timeout=15000)
    page.select_option("select[name=backend]", "cpu")
    page.select_option("select[name=policy]", "builtin")
    page.fill("input[name=max_turns]", "3")
    page.screenshot(path=str(screenshot_path("new-job")), full_page=True)
    page.click("#submit-job")
    page.wait_for_url(f"{base}/jobs/*/", timeout=15000)
    job = Job.objects.get(owner__username="bob")
    assert job.source == TASK_FILE.read_text()

    # Turns arrive live from the real agent worker (compile and gpu workers behind it).
    page.wait_for_selector("article.turn[data-index='1']", timeout=300_000)
    page.screenshot(path=str(screenshot_path("job-running")), full_page=True)
    page.wait_for_function(
        "['succeeded', 'failed', 'cancelled'].includes(document.getElementById('job-state').textContent)",
        timeout=600_000,
    )
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.reason
    stored = job.turns.count()
    assert page.locator("article.turn").count() == stored

    # The viewer after a reload: charts drawn by the local plotly.js, the zip downloads.
    page.reload()
    page.wait_for_selector("#chart-speedup.drawn .main-svg", timeout=30000)
    page.wait_for_selector("#chart-baselines.drawn .main-svg", timeout=30000)
    page.screenshot(path=str(screenshot_path("job-viewer")), full_page=True)
    with page.expect_download() as info:
        page.click("#download-zip")
    data = Path(info.value.path()).read_bytes()
    names = {n.split("/", 1)[1] for n in zipfile.ZipFile(io.BytesIO(data)).namelist()}
    assert {"model_new.py", "README.md", "evaluation.json"} <= names

    # Share it and open the link logged out.
    page.click("#create-share")
    share_url = page.input_value("#share-url")
    anon = chromium_browser.new_context()
    try:
        other = anon.new_page()
        other.goto(share_url)
        other.wait_for_selector("article.turn[data-index='1']", timeout=15000)
        assert other.locator("#create-share").count() == 0 and other.locator("#logout").count() == 0
        other.wait_for_selector("#chart-speedup.drawn .main-svg", timeout=30000)
        other.screenshot(path=str(screenshot_path("job-shared")), full_page=True)
    finally:
        anon.close()
