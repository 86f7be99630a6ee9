"""plotly.js comes from the installed plotly package, through whitenoise: the product works offline."""

from __future__ import annotations

from pathlib import Path

import plotly


def test_plotly_js_is_served_from_the_installed_package(client) -> None:
    response = client.get("/static/plotly/plotly.min.js")

    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    shipped = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    assert body == shipped and len(body) > 1_000_000
    assert "javascript" in response["Content-Type"]
