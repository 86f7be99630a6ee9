"""The job page as a person sees it in headless Chromium: rendered sizes and visible text, not
only the HTML. Pages are rendered by Django's test client beforehand and served to the browser
through Playwright's routing (static files and plotly.js from this checkout), so no live server
is needed; the page's own JS runs for real.

- diffs: a gallery job's page stays a few thousand px per turn and a diff line is one line high
- charts: every drawn plotly chart fits its grid cell (no fixed 700 px width), log axes read at
  powers of ten, a CPU roofline in GFLOP/s, a chart that cannot be drawn says why
- an imported job shows only what it recorded; reward, preset and torch ops are explained
- the new-job form's submit waits for a task
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support.browser import screenshot_path
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import Job

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "webapp" / "jobs" / "static" / "jobs"
PLOTLY = Path(importlib.util.find_spec("plotly").origin).parent / "package_data" / "plotly.min.js"
GALLERY = ROOT / "webapp" / "jobs" / "fixtures" / "gallery"
ORIGIN = "http://kw.test"


def serve(page, pages: dict[str, bytes]) -> None:
    def handle(route):
        url = urlparse(route.request.url)
        path = url.path + (f"?{url.query}" if url.query else "")
        if path in pages:
            return route.fulfill(status=200, body=pages[path], headers={"Content-Type": "text/html; charset=utf-8"})
        if url.path == "/static/plotly/plotly.min.js":
            return route.fulfill(
                status=200, body=PLOTLY.read_bytes(), headers={"Content-Type": "application/javascript"}
            )
        file = STATIC / url.path.removeprefix("/static/jobs/")
        if url.path.startswith("/static/jobs/") and file.is_file():
            ctype = "text/css" if file.suffix == ".css" else "application/javascript"
            return route.fulfill(status=200, body=file.read_bytes(), headers={"Content-Type": ctype})
        return route.fulfill(status=404, body=b"")

    page.route("**/*", handle)


@pytest.fixture
def gallery_job() -> Job:
    data = json.loads((GALLERY / "basic_residual_block.json").read_text())
    return import_trajectory(None, data, origin=Job.Origin.GALLERY, gallery=True, name="basic residual block")


@pytest.fixture
def client() -> Client:
    c = Client()
    c.force_login(User.objects.create_user("viewer", password="pw-viewer-123"))
    return c


def open_page(request, client: Client, path: str):
    """`path` rendered by the test client, opened in Chromium."""
    pages = {path: client.get(path).content}
    page = request.getfixturevalue("browser_page")
    serve(page, pages)
    page.goto(ORIGIN + path)
    return page


def test_a_gallery_job_with_multi_line_diffs_renders_at_a_sane_height(request, client, gallery_job):
    page = open_page(request, client, f"/jobs/{gallery_job.pk}/")
    turns = page.locator("article.turn").count()
    assert turns >= 2
    rows = page.locator("table.diff.unified tr.d-add")
    assert rows.count() > 5, "the gallery job has multi-line diffs"
    height = page.evaluate("document.documentElement.scrollHeight")
    page.screenshot(path=str(screenshot_path("gallery-job-unified")), full_page=False)
    assert height < 3000 * turns, f"{height} px for {turns} turns"

    # One source line of the diff is one line of text: about the line height, and as wide as the table.
    line = rows.first.locator("td.src")
    box, table = line.bounding_box(), page.locator("table.diff.unified").first.bounding_box()
    assert box["height"] < 2.5 * 12.5 * 1.35, box
    assert box["width"] > 0.6 * table["width"], (box, table)
    text = line.inner_text()
    assert "\n" not in text.strip() and len(text.strip()) > 3

    # Side by side too.
    page.check("#diff-mode-split")
    split_height = page.evaluate("document.documentElement.scrollHeight")
    assert split_height < 3000 * turns, f"{split_height} px side by side"
    cell = page.locator("table.diff.split td.s-add").first
    cbox, table = cell.bounding_box(), page.locator("table.diff.split").first.bounding_box()
    assert cbox["width"] > 0.3 * table["width"], (cbox, table)  # each side gets about half
    print(f"page height: {height} px unified, {split_height} px side by side, {turns} turns")


def draw(request, client, job: Job):
    page = open_page(request, client, f"/jobs/{job.pk}/")
    page.wait_for_selector("#chart-speedup.drawn .main-svg", timeout=60000)
    return page


def tick_labels(page, chart: str, axis: str) -> list[str]:
    return page.locator(f"#{chart} g.{axis}tick text").evaluate_all("els => els.map(e => e.textContent)")


def assert_powers_of_ten(labels: list[str]) -> None:
    import math

    assert labels, "no tick labels"
    for label in labels:
        value = float(label.replace("\u2212", "-").replace(",", ""))
        assert value > 0 and abs(math.log10(value) - round(math.log10(value))) < 1e-6, labels


def test_charts_fit_their_cells_and_read_well(request, client, gallery_job):
    page = draw(request, client, gallery_job)
    for chart in ("chart-speedup", "chart-baselines", "chart-roofline"):
        page.wait_for_selector(f"#{chart}.drawn .main-svg", timeout=30000)
    page.locator("#charts").screenshot(path=str(screenshot_path("gallery-job-charts")))
    # this case study profiled version 7, not its best (version 4): the kernels chart says so
    assert "best candidate (version 4) was not profiled" in page.locator("#chart-kernels.note").inner_text()
    for chart in ("chart-speedup", "chart-baselines", "chart-roofline"):
        cell = page.locator(f"#{chart}").bounding_box()
        svg = page.locator(f"#{chart} .main-svg").first.bounding_box()
        assert svg["width"] <= cell["width"] + 1, (chart, svg, cell)
        assert svg["width"] > 0.8 * cell["width"], (chart, svg, cell)  # and uses the cell
        assert svg["x"] + svg["width"] <= page.viewport_size["width"], (chart, svg)
    # The roofline's log axes are labelled at powers of ten, not "5 2 1 5".
    assert_powers_of_ten(tick_labels(page, "chart-roofline", "x"))
    assert_powers_of_ten(tick_labels(page, "chart-roofline", "y"))
    assert "TFLOP/s" in page.locator("#chart-roofline").text_content()
    # A narrower window: the charts follow (responsive), still inside their cells.
    page.set_viewport_size({"width": 700, "height": 700})
    page.wait_for_timeout(500)
    cell = page.locator("#chart-roofline").bounding_box()
    svg = page.locator("#chart-roofline .main-svg").first.bounding_box()
    assert svg["width"] <= cell["width"] + 1 and cell["width"] <= 700, (svg, cell)


def cpu_trajectory() -> dict:
    """The sample run as if on a CPU: a roofline far below a TFLOP/s and no profile."""
    from webapp.jobs.sample_trajectory import build

    data = build(turns=3)
    for e in data["events"]:
        result = e.get("result") if e["type"] == "evaluation" else None
        if result and result.get("roofline"):
            result["roofline"].update(device="AMD EPYC (cpu)", peak_tflops=0.045, peak_bandwidth_gbs=20.0)
            result["device"], result["backend"] = "AMD EPYC (cpu)", "cpu"
        if result is not None:
            result["profile"] = []
    data["events"] = [e for e in data["events"] if e["type"] != "profile"]
    return data


def test_a_cpu_roofline_in_gflops_and_a_missing_kernel_chart_says_why(request, client):
    owner = User.objects.get(username="viewer")
    job = import_trajectory(owner, cpu_trajectory())
    page = draw(request, client, job)
    page.wait_for_selector("#chart-roofline.drawn .main-svg", timeout=30000)
    text = page.locator("#chart-roofline").text_content()
    assert "GFLOP/s" in text and "TFLOP/s" not in text, text
    assert "45 GFLOP/s" in text, text
    assert_powers_of_ten(tick_labels(page, "chart-roofline", "y"))
    page.locator("#charts").screenshot(path=str(screenshot_path("cpu-job-charts")))
    note = page.locator("#chart-kernels")
    assert note.is_visible() and "was not profiled" in note.inner_text()
    # error bars: none from min..max (this sample has no rounds): the bars' whiskers, if any, stay
    # within a bar's height
    assert "min..max" not in page.locator("#chart-baselines").text_content()


def test_an_imported_job_says_only_what_it_knows_and_explains_its_numbers(request, client, gallery_job):
    page = open_page(request, client, f"/jobs/{gallery_job.pk}/")
    head = page.locator("#job-head").inner_text()
    assert "elapsed" not in head and "?" not in page.locator("#job-options").inner_text()
    assert "max turns ?" not in head and "torch ops ?" not in head and "gallery · gallery" not in head
    assert "gallery case study" in head
    assert "?" not in page.locator("#turn-0 .ev-task").inner_text()
    # reward, preset and torch ops explained: in the legend, and as tooltips where they are shown
    page.click("#legend > summary")
    legend = page.locator("#legend").inner_text()
    assert "3: correct and more than 5% faster than both eager PyTorch and torch.compile" in legend
    assert "tolerance preset default" in legend and "atol + rtol" in legend
    title = page.locator("#job-best .best").get_attribute("title")
    assert title.startswith("the best verified candidate (version 4) · reward ") and "faster" in title
    assert "torch.compile" in page.locator("article.turn .reward").first.get_attribute("title")


def test_the_new_job_form_waits_for_a_task_and_explains_its_options(request, client):
    page = open_page(request, client, "/jobs/new/")
    submit = page.locator("#submit-job")
    assert submit.is_disabled() and page.locator("#submit-why").inner_text() == "upload or paste a task first"
    page.fill("#id_source", (ROOT / "tests" / "webapp" / "data" / "row_softmax_small.py").read_text())
    page.wait_for_function("!document.getElementById('submit-job').disabled", timeout=10000)
    page.fill("#id_source", "")
    page.wait_for_function("document.getElementById('submit-job').disabled", timeout=10000)
    assert "atol" in page.locator("#preset-help").inner_text()
    page.select_option("#id_preset", "kernelbench")
    assert page.locator("#preset-help").inner_text().startswith("Tolerance preset kernelbench: ")
    assert "own kernels" in page.locator("#torch-ops-help").inner_text()
