"""Uploading any .py file with nn.Module subclasses: the form lists the classes (the web process
parses, never imports), the user picks one, gives constructor arguments and input specs, and the
job is created with a KernelBench-format task wrapping it. The form in headless Chromium, with
the server's check answered by Django's test client."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support.browser import screenshot_path
from tests.webapp.test_job_page_renders import ORIGIN, serve
from webapp.jobs.models import Job
from webapp.jobs.module_wrapper import WRAPPER_MARK

pytestmark = pytest.mark.django_db
SE_FILE = Path(__file__).parent / "data" / "se_block_module.py"
SE = SE_FILE.read_text()


@pytest.fixture
def client() -> Client:
    c = Client()
    c.force_login(User.objects.create_user("module-owner", password="pw-module-123"))
    return c


def test_the_check_lists_the_classes_and_checks_the_choice(client):
    planted = SE + "\nopen('/tmp/kw-imported-the-upload', 'w').write('x')\n"
    data = client.post("/jobs/check/", {"source": planted}).json()
    assert not Path("/tmp/kw-imported-the-upload").exists()  # parsed, never run
    assert data["kernelbench"] is False
    assert [c["name"] for c in data["classes"]] == ["Squeeze", "SEBlock", "TokenMixer"]
    se = data["classes"][1]
    assert se["init_params"] == ["channels", "reduction=REDUCTION"] and se["forward_params"] == ["x"]
    ok = client.post(
        "/jobs/check/",
        {"source": SE, "module_class": "SEBlock", "init_args": "[16]", "input_specs": "float32[4,16,8,8]"},
    ).json()
    assert ok["ok"] is True and ok["errors"] == []
    bad = client.post(
        "/jobs/check/",
        {"source": SE, "module_class": "SEBlock", "init_args": "[16]", "input_specs": "float32[4,16,8,8]\nfloat32[2]"},
    ).json()
    assert bad["ok"] is False and bad["errors"] == ["SEBlock.forward(x) takes 1 input; 2 specs given"]


def test_a_job_from_a_module(client):
    resp = client.post(
        "/jobs/new/",
        {
            "source": SE,
            "module_class": "SEBlock",
            "init_args": '{"channels": 16}',
            "input_specs": "float32[4,16,8,8]",
            "backend": "cpu",
            "policy": "builtin",
            "max_turns": 1,
        },
    )
    assert resp.status_code == 302, resp.content.decode()[:2000]
    job = Job.objects.get(name="SEBlock")
    assert job.source.startswith(SE.rstrip("\n")) and WRAPPER_MARK in job.source
    assert "class Model(_KwModule):" in job.source and "torch.randn((4, 16, 8, 8), dtype=torch.float32)" in job.source


def test_a_bad_spec_comes_back_with_the_form_filled(client):
    resp = client.post(
        "/jobs/new/", {"source": SE, "module_class": "SEBlock", "init_args": "[16]", "input_specs": "float32[4,x]"}
    )
    html = resp.content.decode()
    assert resp.status_code == 400 and "dimensions are whole numbers" in html
    assert 'data-class="SEBlock"' in html and "float32[4,x]</textarea>" in html
    assert not Job.objects.exists()


@pytest.mark.slow
def test_the_form_in_the_browser(request, client):
    pages = {"/jobs/new/": client.get("/jobs/new/").content}
    page = request.getfixturevalue("browser_page")
    serve(page, pages)
    checks: list[dict] = []

    def answer_check(route):  # the server's check, by the test client (same thread, same database)
        form = dict(parse_qsl(route.request.post_data or ""))
        checks.append(form)
        body = client.post("/jobs/check/", form).content
        route.fulfill(status=200, body=body, headers={"Content-Type": "application/json"})

    page.route(ORIGIN + "/jobs/check/", answer_check)
    page.goto(ORIGIN + "/jobs/new/")
    page.set_input_files("#id_file", str(SE_FILE))
    page.wait_for_selector("#module-pick:not([hidden])", timeout=10000)
    assert (
        page.locator("#module-found").inner_text()
        == "3 nn.Module classes found: Squeeze, SEBlock, TokenMixer. Pick the one to optimize."
    )
    assert page.locator("#id_module_class option").all_inner_texts()[1:] == [
        "Squeeze()",
        "SEBlock(channels, reduction=REDUCTION) · Squeeze-and-excitation: channel attention from global pooling.",
        "TokenMixer()",
    ]
    assert page.locator("#submit-job").is_disabled()
    assert "pick the class to optimize below" in page.locator("#live-check").inner_text()
    page.select_option("#id_module_class", "SEBlock")
    assert (
        page.locator("#module-signature").inner_text()
        == "SEBlock(channels, reduction=REDUCTION) · forward(x) · line 15"  # the class statement's line
    )
    page.fill("#id_init_args", "[16]")
    page.fill("#id_input_specs", "float32[4,16,8,8] randn")
    page.wait_for_selector("#live-check li.ok >> text=SEBlock as a KernelBench task", timeout=10000)
    assert page.locator("#submit-job").is_enabled()
    page.locator("#new-job-form").screenshot(path=str(screenshot_path("new-job-module")))
    assert checks[-1]["module_class"] == "SEBlock" and checks[-1]["input_specs"] == "float32[4,16,8,8] randn"
    page.fill("#id_input_specs", "float32[4,16,8,8]\nint64[3]")
    page.wait_for_selector("#live-check li.error >> text=takes 1 input; 2 specs given", timeout=10000)
    assert page.locator("#submit-job").is_disabled()


def test_the_api_takes_a_module_too():
    from webapp.jobs.models import ApiToken

    _, key = ApiToken.issue(User.objects.create_user("api-module", password="pw-api-123"), "test")
    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    body = {
        "source": SE,
        "module": {"class": "SEBlock", "init": [16], "inputs": ["float32[4,16,8,8]"]},
        "options": {"backend": "cpu"},
    }
    resp = api.post("/api/jobs", body, content_type="application/json")
    assert resp.status_code == 201, resp.content
    job = Job.objects.get(pk=resp.json()["id"])
    assert job.name == "SEBlock" and WRAPPER_MARK in job.source and "return [16]" in job.source
    bad = api.post(
        "/api/jobs",
        {**body, "module": {"class": "SEBlock", "inputs": ["float32[4,16"]}},
        content_type="application/json",
    )
    assert bad.status_code == 400 and "not an input spec" in bad.json()["errors"][0]
    assert api.post("/api/jobs", {**body, "module": "SEBlock"}, content_type="application/json").status_code == 400
