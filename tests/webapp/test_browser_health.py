"""/healthz and /health/ in headless Chromium against a live daphne with real workers."""

from __future__ import annotations

import json

import pytest

from tests.support.browser import screenshot_path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_healthz_in_chromium_shows_every_part_green(live_asgi_server, browser_page) -> None:
    page = browser_page

    response = page.goto(live_asgi_server.url + "/healthz")
    assert response.status == 200
    report = json.loads(page.locator("body").inner_text())
    assert report["ok"] is True
    assert all(part["ok"] for part in report["parts"].values()), report

    response = page.goto(live_asgi_server.url + "/health/")
    assert response.status == 200
    rows = page.locator("tr.part")
    names = [rows.nth(i).get_attribute("data-part") for i in range(rows.count())]
    assert names == [
        "database",
        "redis",
        "channel_layer",
        "workers.agent",
        "workers.compile",
        "workers.gpu",
        "sandbox",
        "sandbox.containment",
        "model_endpoint",
    ]
    for i in range(rows.count()):
        assert rows.nth(i).get_attribute("class") == "part ok", rows.nth(i).inner_text()
    # Green as a person sees it, not only as a class name.
    dot = page.locator('tr[data-part="redis"] .dot')
    assert dot.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(26, 127, 55)"
    assert page.locator("#overall").inner_text() == "all required parts up"
    assert "sk-test-key-that-must-never-be-shown" not in page.content()
    page.screenshot(path=screenshot_path("healthz"), full_page=True)
    assert screenshot_path("healthz").stat().st_size > 10_000
