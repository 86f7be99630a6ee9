"""A live job page in headless Chromium against a real daphne and the Redis channel layer: a
stored turn arrives rendered in its websocket notice and shows without any fetch (the charts in a
notice of their own), and a page that missed a notice (its socket dropped, or the notice lost)
catches up from the database.

Turns are stored by the same service a worker uses (services.store_turn) in this process. The
"missed notice" is made by Playwright's websocket routing between the page and the server, which
forwards everything except the notice being dropped; nothing of the app is replaced.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from tests.support.stack import start_asgi_server
from webapp.jobs import services
from webapp.jobs.models import Job
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build
from webapp.jobs.turns import group_by_turn

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
TURNS = group_by_turn(build(turns=8)["events"])
WS_ROUTE = re.compile(r"/ws/jobs/\d+/")
CHART_HAS_TURN_3 = "() => { const el = document.getElementById('chart-speedup'); return !!(el && el.data && el.data[0].x.includes(3)); }"


@pytest.fixture(scope="module")
def server(live_stack_env, tmp_path_factory):
    server = start_asgi_server(live_stack_env, tmp_path_factory.mktemp("live-turns"))
    yield server
    server.process.stop()


@pytest.fixture
def job() -> Job:
    """A public running job with turns 0 and 1 stored (anyone may watch it)."""
    owner = User.objects.create_user("owner", password="pw-owner-123")
    job = services.start_job(
        services.create_job(owner, "watched live", SOFTMAX_TASK, {"backend": "cpu"}, enqueue=False)
    )
    Job.objects.filter(pk=job.pk).update(visibility=Job.Visibility.PUBLIC)
    for index in (0, 1):
        services.store_turn(job, index, TURNS[index])
    return Job.objects.get(pk=job.pk)


def open_live(page, server, job) -> list[str]:
    """Open the job page, wait for its socket and its first catch-up fetch; the /updates/ URLs
    the page asks for from then on are collected in the returned list."""
    with page.expect_response(lambda r: "/updates/" in r.url, timeout=15000):
        page.goto(f"{server.url}/jobs/{job.pk}/")
    page.wait_for_function("document.body.dataset.ws === 'open'", timeout=15000)
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if "/updates/" in r.url else None)
    return fetched


def message_of(page, index: int) -> str:
    return page.locator(f"#turn-{index} .ev-msg pre").first.inner_text()


def test_a_stored_turn_shows_from_its_notice_without_a_fetch(server, job, browser_page) -> None:
    page = browser_page
    fetched = open_live(page, server, job)

    services.store_turn(job, 2, TURNS[2])
    page.wait_for_selector("#turn-2", state="visible", timeout=15000)
    # the turn as the server rendered it, model output shown as text (the <script> is not run)
    assert message_of(page, 2) == "Turn 2: fuse the row max and sum <script>alert('x')</script>"
    assert page.locator("#turn-2 header").inner_text().startswith("Turn 2")
    assert page.locator("#turn-count").inner_text() == "3"
    assert page.locator('#timeline a.tick[href="#turn-2"]').count() == 1
    services.store_turn(job, 3, TURNS[3])
    page.wait_for_selector("#turn-3", state="visible", timeout=15000)
    assert message_of(page, 3).startswith("Turn 3: fuse the row max")
    assert page.evaluate("document.body.dataset.pushedTurns") == "2"
    # the charts follow in a notice of their own: the speedup chart reaches turn 3
    page.wait_for_function(CHART_HAS_TURN_3, timeout=30000)
    assert fetched == []  # both turns and the charts came with their notices


def test_a_page_that_missed_a_notice_shows_the_missed_turn(server, job, browser_page) -> None:
    """Turn 2's notice is lost and the socket drops (a network blip): the page reconnects and
    fetches what it missed. Then turn 4's notice alone is lost: turn 5's notice leaves a gap,
    so the page fetches from the database instead of showing turn 5 after turn 3."""
    page = browser_page
    drop = {"turn": 2, "then_close": True}
    connections = []

    def route(ws) -> None:
        upstream = ws.connect_to_server()
        connections.append(ws)
        ws.on_message(lambda message: upstream.send(message))

        def from_server(message) -> None:
            if f'"turn":{drop["turn"]},' in message and '"kind":"turn.ready"' in message:
                if drop.pop("then_close", False):
                    ws.close(code=1001, reason="network blip")
                    upstream.close()
                return  # lost
            ws.send(message)

        upstream.on_message(from_server)

    page.route_web_socket(WS_ROUTE, route)
    fetched = open_live(page, server, job)

    services.store_turn(job, 2, TURNS[2])
    page.wait_for_selector("#turn-2", state="visible", timeout=15000)
    assert len(connections) == 2  # the page opened a new socket after the drop
    assert message_of(page, 2).startswith("Turn 2: fuse the row max")
    assert fetched and all("since=1" in url for url in fetched)  # caught up from the database

    services.store_turn(job, 3, TURNS[3])
    page.wait_for_selector("#turn-3", state="visible", timeout=15000)
    drop["turn"] = 4
    fetched.clear()
    services.store_turn(job, 4, TURNS[4])
    services.store_turn(job, 5, TURNS[5])
    page.wait_for_selector("#turn-5", state="visible", timeout=15000)
    assert message_of(page, 4).startswith("Turn 4: fuse the row max")
    order = page.eval_on_selector_all("#turns article.turn", "arts => arts.map(a => a.dataset.index)")
    assert order == ["0", "1", "2", "3", "4", "5"]
    assert fetched and "since=3" in fetched[0]
