"""A failed job's header as a person sees it in headless Chromium (the page's own job.js runs
and writes the live state's reason into the header): the actual reason in one visible line,
not "(the policy finished)" and not a traceback. Pages rendered by the test client and served
through Playwright's routing (tests/webapp/test_job_page_renders.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support.browser import screenshot_path
from tests.webapp.test_failure_reason import BUILTIN_SUMMARY, MISFIT_ERROR, failed_job, misfit_traceback
from tests.webapp.test_job_page_renders import ORIGIN, serve

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def header_of(request, job) -> tuple[str, str]:
    """(the visible reason line, the header's whole visible text) once job.js has run."""
    path = f"/jobs/{job.pk}/"
    client = Client()
    client.force_login(job.owner)
    page_html = client.get(path).content  # rendered before Playwright's loop runs in this thread
    page = request.getfixturevalue("browser_page")
    serve(page, {path: page_html})
    page.goto(ORIGIN + path)
    page.wait_for_function("document.body.dataset.lastTurn !== undefined", timeout=30000)
    reason = page.locator("#job-reason")
    assert reason.is_visible()
    return reason.inner_text(), page.locator("#job-head").inner_text()


@pytest.mark.parametrize(
    ("summary", "expected"),
    [("", MISFIT_ERROR), (BUILTIN_SUMMARY, BUILTIN_SUMMARY)],
    ids=["evaluation-reason", "policy-summary"],
)
def test_a_failed_job_s_header_says_why_in_one_line(request, tmp_path, summary, expected):
    owner = User.objects.create_user("failing", password="pw-failing-123")
    job = failed_job(owner, misfit_traceback(tmp_path), summary=summary)
    line, head = header_of(request, job)
    assert line == expected
    assert "\n" not in line and "Traceback" not in head and "(the policy finished)" not in head
    assert "failed" in head.split("\n")[0]
    request.getfixturevalue("browser_page").screenshot(
        path=str(screenshot_path(f"failed-job-reason-{request.node.callspec.id}"))
    )
