"""A browser's websocket to the live daphne process, echoed through the Redis channel layer."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ECHO_JS = """
async (url) => await new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    const got = [];
    ws.onopen = () => { ws.send("first"); ws.send("second"); };
    ws.onmessage = (e) => { got.push(e.data); if (got.length === 2) { ws.close(); resolve(got); } };
    ws.onerror = () => reject(new Error("websocket error"));
    setTimeout(() => reject(new Error("no echo within 10 s")), 10000);
})
"""


def test_browser_websocket_echo_through_the_live_server(live_asgi_server, browser_page) -> None:
    browser_page.goto(live_asgi_server.url + "/health/")
    ws_url = live_asgi_server.url.replace("http://", "ws://") + "/ws/echo/"

    assert browser_page.evaluate(ECHO_JS, ws_url) == ["first", "second"]
