"""Uploading an ExportedProgram (.pt2, torch.export.save) on the new-job form: the web process
reads the archive's table of contents and recorded inputs, never loads the file; the job's task
carries the file and loads it inside the sandbox. The form in headless Chromium, with the
server's answers given by Django's test client."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agent.exported_task import EXPORTED_MARK, MAX_EXPORTED_BYTES
from tests.agent.test_cli_modules import export_small_model
from tests.support.browser import screenshot_path
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pt2") / "scorer.pt2"
    export_small_model(path)
    return path


@pytest.fixture
def client(monkeypatch) -> Client:
    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("torch.export.load ran in the web process")

    monkeypatch.setattr(torch.export, "load", refuse)
    c = Client()
    c.force_login(User.objects.create_user("pt2-owner", password="pw-pt2-123"))
    return c


def pt2(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def embedded(source: str) -> bytes:
    return base64.b64decode(re.search(r'_KW_PT2 = """\n(.*?)"""', source, re.S).group(1))


def test_a_job_from_a_pt2_carries_the_file_in_its_task(client, exported):
    resp = client.post(
        "/jobs/new/",
        {"file": pt2("scorer.pt2", exported.read_bytes()), "backend": "cpu", "policy": "builtin", "max_turns": 1},
    )
    assert resp.status_code == 302, resp.content.decode()[:2000]
    job = Job.objects.get(owner__username="pt2-owner")
    assert job.name == "scorer" and EXPORTED_MARK in job.source and embedded(job.source) == exported.read_bytes()
    assert "Recorded inputs: x: int64[4,6]; scale: float32[4,6,1]" in job.source
    # the job page shows the task without the file's base64 (the download keeps it)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    blob = re.search(r'_KW_PT2 = """\n(.*?)"""', job.source, re.S).group(1)
    assert blob[:200] not in page and "Recorded inputs" in page and "_KW_PT2" in page


def test_the_check_lists_the_recorded_inputs(client, exported):
    data = client.post("/jobs/check/", {"file": pt2("scorer.pt2", exported.read_bytes())}).json()
    assert data["ok"] is True and data["errors"] == []
    assert data["exported"]["inputs"] == ["x: int64[4,6]", "scale: float32[4,6,1]"]
    assert data["exported"]["bytes"] == exported.stat().st_size


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"PK\x03\x04" + b"\0" * 64, "the .pt2 file is damaged (truncated or not written by torch.export.save)"),
        (
            b"print('a python file named .pt2')\n",
            "not a .pt2 file: an ExportedProgram saved with torch.export.save is a zip archive",
        ),
        (b"PK\x03\x04" + b"\0" * MAX_EXPORTED_BYTES, f"the limit is {MAX_EXPORTED_BYTES} bytes"),
    ],
)
def test_a_bad_pt2_is_refused_with_what_is_wrong(client, data, expected):
    check = client.post("/jobs/check/", {"file": pt2("model.pt2", data)}).json()
    assert check["ok"] is False and expected in check["errors"][0], check
    resp = client.post("/jobs/new/", {"file": pt2("model.pt2", data), "backend": "cpu"})
    assert resp.status_code == 400 and expected.lower() in resp.content.decode().lower()
    assert not Job.objects.exists()


def test_a_truncated_pt2_is_damaged(client, exported):
    data = exported.read_bytes()[:3000]
    check = client.post("/jobs/check/", {"file": pt2("scorer.pt2", data)}).json()
    assert check["ok"] is False and check["errors"][0].startswith("the .pt2 file is damaged"), check


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_form_in_the_browser(request, client, exported, live_server):
    """Against Django's live server (a browser's request interception drops a multipart body's
    file content, so the file must reach a real server)."""
    page = request.getfixturevalue("browser_page")
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )
    page.goto(live_server.url + "/jobs/new/")
    assert page.locator("#id_file").count() == 1 and page.locator("#exported-note").is_hidden()
    page.set_input_files("#id_file", str(exported))
    page.wait_for_selector(
        "#live-check li.ok >> text=recorded inputs: x: int64[4,6]; scale: float32[4,6,1]", timeout=15000
    )
    note = page.locator("#exported-note")
    assert note.is_visible() and "random values of the recorded shapes and dtypes" in note.inner_text()
    assert page.locator("#id_source").is_disabled() and page.locator("#module-pick").is_hidden()
    assert page.locator("#submit-job").is_enabled()
    page.locator("#new-job-form").screenshot(path=str(screenshot_path("new-job-pt2")))
    page.select_option("select[name=backend]", "cpu")
    page.select_option("select[name=policy]", "builtin")
    with page.expect_navigation(timeout=30000):
        page.click("#submit-job")
    assert re.search(r"/jobs/\d+/$", page.url), page.locator("#server-errors").inner_text()
    job = Job.objects.get(owner__username="pt2-owner")
    assert job.name == "scorer" and embedded(job.source) == exported.read_bytes() and job.options["backend"] == "cpu"
