"""The confirmed result as a person sees it in headless Chromium: the header's visible text
carries the interval, the speedup chart's drawn best line ends at the header's number, an
interval holding 1.0 is never shown as faster, and the gallery says "no interval recorded".
Pages are rendered by the test client and served through Playwright's routing
(tests/webapp/test_job_page_renders.py), so the page's own JS and plotly run for real."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support.browser import screenshot_path
from tests.webapp.paired_trajectories import confirmed_run, eval2
from tests.webapp.test_job_page_renders import GALLERY, ORIGIN, serve
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import Job

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

BEST_LINE = (
    """el => { const t = el.data.find(d => d.name === "best verified vs eager"); return t.y[t.y.length - 1]; }"""
)


@pytest.fixture
def owner() -> User:
    return User.objects.create_user("viewer", password="pw-viewer-123")


@pytest.fixture
def client(owner) -> Client:
    c = Client()
    c.force_login(owner)
    return c


def open_pages(request, client: Client, *paths: str):
    """`paths` rendered by the test client first (the database is not usable from the test once
    Playwright's loop runs), then the first opened in Chromium."""
    pages = {p: client.get(p).content for p in paths}
    page = request.getfixturevalue("browser_page")
    serve(page, pages)
    page.goto(ORIGIN + paths[0])
    return page


def drawn_best_line(page) -> float:
    page.wait_for_selector("#chart-speedup.drawn .main-svg", timeout=60000)
    return page.locator("#chart-speedup").evaluate(BEST_LINE)


def test_the_header_shows_the_confirmed_interval_and_the_chart_ends_at_it(request, client, owner):
    job = import_trajectory(owner, confirmed_run(eval2(2, 1.42, 1.2)))
    result = job.result()
    page = open_pages(request, client, f"/jobs/{job.pk}/", "/")
    best = page.locator("#job-best")
    assert best.is_visible()
    head = best.inner_text()
    assert re.search(r"reward 3 · 1\.42x vs eager \(95% interval 1\.\d+-1\.\d+x, 12 paired rounds\)", head), head
    assert f"reward 3 · {result.speed.text()} (confirmed)" in head
    assert re.search(r"1\.2x vs torch\.compile \(95% interval 1\.\d+-1\.\d+x, 12 paired rounds\)", head), head
    number = float(head.split(" · ")[1].split("x vs eager")[0])
    line = drawn_best_line(page)
    assert round(line, 2) == number == 1.42 and line == result.speed.vs_eager.ratio
    legend = page.locator("#chart-speedup .legend").text_content()
    assert f"result: {result.speed.vs_eager.text()}"[:120] in " ".join(legend.split()), legend
    page.screenshot(path=str(screenshot_path("confirmed-result-header")))
    # the job list says the same
    page.goto(ORIGIN + "/")
    assert result.text() in page.locator(f"tr[data-job='{job.pk}']").inner_text()


def test_an_interval_holding_one_is_never_shown_as_faster(request, client, owner):
    job = import_trajectory(owner, confirmed_run(eval2(2, 1.01, 0.99)))
    page = open_pages(request, client, f"/jobs/{job.pk}/")
    head = page.locator("#job-best").inner_text()
    assert "no measurable difference vs eager (1.01x, 95% interval" in head, head
    assert "faster" not in head
    assert round(drawn_best_line(page), 2) == 1.01
    assert "faster" not in page.locator("#chart-speedup .legend").text_content()


def test_gallery_results_without_intervals_say_so(request, client):
    data = json.loads((GALLERY / "basic_residual_block.json").read_text())
    job = import_trajectory(None, data, origin=Job.Origin.GALLERY, gallery=True, name="basic residual block")
    ratio = job.result().speed.vs_eager.ratio
    page = open_pages(request, client, "/gallery/", f"/jobs/{job.pk}/")
    row = page.locator("#gallery tr", has_text="basic residual block").inner_text()
    assert "vs eager (no interval recorded)" in row, row
    page.goto(ORIGIN + f"/jobs/{job.pk}/")
    head = page.locator("#job-best").inner_text()
    assert "no interval recorded" in head and "(not confirmed)" in head
    assert drawn_best_line(page) == ratio
