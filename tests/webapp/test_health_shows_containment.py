"""/healthz and /health/ show whether untrusted code runs inside its wall (sandbox.containment):
a required part, red when containment is unavailable, and a loud warning when switched off."""

from __future__ import annotations

import subprocess
import sys

import pytest

from webapp.core import health

containment = pytest.importorskip("sandbox.containment")

UNAVAILABLE = containment.Status(False, "unavailable", "bubblewrap not found (bwrap on PATH)")


@pytest.fixture
def no_bubblewrap(monkeypatch):
    monkeypatch.setattr(containment, "status", lambda gpu=None: UNAVAILABLE)


def test_the_part_is_required_and_reports_what_the_sandbox_reports(monkeypatch) -> None:
    monkeypatch.delenv(containment.OPT_OUT_ENV, raising=False)
    st = containment.status()

    part = health._timed("sandbox.containment", True, health.check_containment)

    assert part.required is True
    assert part.ok is st.ok
    assert part.detail["mode"] == st.mode
    if st.ok:
        assert part.summary == st.mode == "bubblewrap" and part.warning is None


@pytest.mark.django_db
def test_unavailable_containment_is_red_and_makes_healthz_503_with_how_to_enable(client, no_bubblewrap) -> None:
    response = client.get("/healthz")

    body = response.json()
    assert response.status_code == 503 and body["ok"] is False
    part = body["parts"]["sandbox.containment"]
    assert part["ok"] is False and part["required"] is True
    assert part["detail"]["mode"] == "unavailable"
    assert "bubblewrap not found" in part["error"]
    assert UNAVAILABLE.how_to_enable in part["error"]

    html = client.get("/health/").content.decode()
    assert 'class="part down" data-part="sandbox.containment"' in html
    assert "apt-get install bubblewrap" in html


@pytest.mark.django_db
def test_the_explicit_opt_out_is_up_but_loudly_labelled(client, monkeypatch) -> None:
    monkeypatch.setenv(containment.OPT_OUT_ENV, "1")

    body = client.get("/healthz").json()
    part = body["parts"]["sandbox.containment"]
    assert part["ok"] is True and part["detail"]["mode"] == "uncontained"
    assert part["summary"] == "UNCONTAINED"
    assert any(w.startswith("sandbox.containment: ") and "without a sandbox" in w for w in body["warnings"])

    html = client.get("/health/").content.decode()
    assert 'class="part warn" data-part="sandbox.containment"' in html
    assert 'role="alert" data-warning="sandbox.containment"' in html


def test_a_missing_or_broken_containment_module_is_red_not_a_500(monkeypatch) -> None:
    def broken(gpu=None):
        raise OSError("seccomp probe crashed")

    monkeypatch.setattr(containment, "status", broken)
    part = health._timed("sandbox.containment", True, health.check_containment)
    assert part.ok is False and part.error == "OSError: seccomp probe crashed"


def test_checking_containment_does_not_import_torch_in_the_web_process() -> None:
    code = (
        "import django, os, sys; os.environ['DJANGO_SETTINGS_MODULE'] = 'webapp.settings'; django.setup();"
        "from webapp.core.health import _timed, check_containment;"
        "print(_timed('c', True, check_containment).detail.get('mode'));"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    assert out.stdout.split()[-1] == "False"
