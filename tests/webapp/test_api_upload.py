"""POST /api/jobs takes what the new-job form takes: any nn.Module class of a file (`module`) and
an ExportedProgram (`exported_program`, a .pt2 as base64), built into the task by the form's own
functions; bad input is a 400 that says why. The .pt2 files are made here with torch.export, and
the web process never loads them."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agent.exported_task import EXPORTED_MARK, MAX_EXPORTED_BYTES
from agent.module_task import WRAPPER_MARK
from tests.agent.test_cli_modules import export_small_model
from webapp.jobs.models import ApiToken, Job
from webapp.jobs.task_check import MAX_SOURCE_BYTES

pytestmark = pytest.mark.django_db
SE_BLOCK = (Path(__file__).parent / "data" / "se_block_module.py").read_text()


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("pt2") / "scorer.pt2"
    export_small_model(path)
    return path.read_bytes()


@pytest.fixture
def owner(monkeypatch):
    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("torch.export.load ran in the web process")

    monkeypatch.setattr(torch.export, "load", refuse)
    return User.objects.create_user("uploader", password="pw-uploader-123")


@pytest.fixture
def api(owner) -> Client:
    _, key = ApiToken.issue(owner, "test")
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def post(api: Client, body: dict):
    return api.post("/api/jobs", body, content_type="application/json")


def errors(resp) -> str:
    assert resp.status_code == 400, resp.content[:500]
    return " ".join(resp.json()["errors"])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_module_class_becomes_the_same_task_as_on_the_form(api, owner):
    resp = post(
        api,
        {
            "source": SE_BLOCK,
            "module": {"class": "SEBlock", "init": [64], "inputs": ["float32[8,64,28,28]"]},
            "options": {"backend": "cpu"},
        },
    )
    assert resp.status_code == 201, resp.content[:500]
    job = Job.objects.get(pk=resp.json()["id"])
    assert job.name == "SEBlock" and WRAPPER_MARK in job.source and "class Model(_KwModule)" in job.source

    form = Client()
    form.force_login(owner)
    page = form.post(
        "/jobs/new/",
        {
            "file": SimpleUploadedFile("se.py", SE_BLOCK.encode()),
            "module_class": "SEBlock",
            "init_args": "[64]",
            "input_specs": "float32[8,64,28,28]",
            "backend": "cpu",
            "policy": "builtin",
            "max_turns": 1,
        },
    )
    assert page.status_code == 302, page.content.decode()[:2000]
    assert Job.objects.exclude(pk=job.pk).get().source == job.source


def test_keyword_arguments_and_one_string_of_specs(api):
    resp = post(
        api,
        {
            "name": "tokens",
            "source": SE_BLOCK,
            "module": {
                "class": "TokenMixer",
                "init": {"channels": 32, "reduction": 8},
                "inputs": "float32[4,32,7,7]\nbool[4,7] bernoulli(0.2)",
            },
        },
    )
    assert resp.status_code == 201, resp.content[:500]
    source = Job.objects.get(pk=resp.json()["id"]).source
    assert "super().__init__(**{'channels': 32, 'reduction': 8})" in source
    assert "torch.randn((4, 32, 7, 7), dtype=torch.float32)" in source and "(torch.rand((4, 7)) < 0.2)" in source


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ({"class": "SEBlock", "init": [64], "inputs": ["float32[8,64"]}, "is not an input spec"),
        (
            {"class": "Nope", "init": [64], "inputs": ["float32[8,64,28,28]"]},
            "'Nope' is not an nn.Module subclass of this file (found: Squeeze, SEBlock, TokenMixer)",
        ),
        (
            {"class": "SEBlock", "init": [64], "inputs": ["float32[8,64,28,28]", "float32[8]"]},
            "SEBlock.forward(x) takes 1 input; 2 specs given",
        ),
        ({"class": "SEBlock", "init": "64", "inputs": ["float32[8,64,28,28]"]}, "`module.init` must be a JSON array"),
        ({"class": "SEBlock", "inputs": [8, 64]}, "`module.inputs` must be an array of input specs"),
        ({"init": [64]}, '`module` must be an object with "class" (required)'),
        ("SEBlock", '`module` must be an object with "class" (required)'),
    ],
)
def test_a_bad_module_is_a_400_that_says_why(api, module, says):
    assert says in errors(post(api, {"source": SE_BLOCK, "module": module}))
    assert not Job.objects.exists()


def test_an_exported_program_carries_the_file_and_is_never_loaded_here(api, exported):
    resp = post(api, {"exported_program": b64(exported), "options": {"backend": "cpu"}})
    assert resp.status_code == 201, resp.content[:500]
    job = Job.objects.get(pk=resp.json()["id"])
    assert job.name == "exported" and EXPORTED_MARK in job.source
    assert "Recorded inputs: x: int64[4,6]; scale: float32[4,6,1]" in job.source
    carried = re.search(r'_KW_PT2 = """\n(.*?)"""', job.source, re.S).group(1)
    assert base64.b64decode(carried) == exported


def test_base64_with_line_breaks_is_read_too(api, exported):
    wrapped = "\n".join(re.findall(".{1,76}", b64(exported)))
    resp = post(api, {"name": "scorer", "exported_program": wrapped})
    assert resp.status_code == 201 and Job.objects.get(pk=resp.json()["id"]).name == "scorer"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("not base64 at all!", "`exported_program` is not base64"),
        (b64(b"a plain text file, not an archive"), "not a .pt2 file"),
        (b64(b"PK\x03\x04" + b"\0" * 100), "the .pt2 file is damaged"),
        (b64(b"PK\x03\x04" + b"\0" * (MAX_EXPORTED_BYTES + 1)), f"more than {MAX_EXPORTED_BYTES} bytes"),
        (12, "must be a .pt2 file (torch.export.save) as a base64 string"),
    ],
)
def test_a_bad_exported_program_is_a_400_that_says_why(api, value, says):
    assert says in errors(post(api, {"exported_program": value}))
    assert not Job.objects.exists()


def test_an_exported_program_excludes_source_and_module(api, exported):
    for extra in (
        {"source": SE_BLOCK},
        {"module": {"class": "SEBlock", "init": [64], "inputs": "float32[8,64,28,28]"}},
    ):
        assert "give `exported_program` alone" in errors(post(api, {"exported_program": b64(exported), **extra}))


def test_evaluate_takes_an_exported_task_over_the_text_limit(api, tmp_path):
    """A .pt2 of 256 K float weights makes a task above the 256 KiB a hand-written one may have;
    /api/evaluate applies the limit of the task's kind (the files are checked next)."""
    import torch

    path = tmp_path / "wide.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(256, 256), (torch.randn(2, 256),)), str(path))
    source = post(api, {"exported_program": b64(path.read_bytes())})
    assert source.status_code == 201, source.content[:500]
    task = Job.objects.get(pk=source.json()["id"]).source
    assert len(task.encode()) > MAX_SOURCE_BYTES
    resp = api.post("/api/evaluate", {"task": task, "files": {}}, content_type="application/json")
    assert resp.status_code == 400 and resp.json()["error"] == "`files` must be an object of relative path -> text"
    too_big = api.post(
        "/api/evaluate", {"task": "x = 1\n" + "#" * MAX_SOURCE_BYTES, "files": {}}, content_type="application/json"
    )
    assert too_big.status_code == 400 and "the limit is 262144 bytes" in too_big.json()["errors"][0]


def test_the_openapi_schema_documents_both_upload_kinds():
    schemas = Client().get("/api/openapi.json").json()["components"]["schemas"]
    create = schemas["JobCreate"]["properties"]
    assert {"$ref": "#/components/schemas/ModuleChoice"} in create["module"]["anyOf"]  # or null: no module
    assert schemas["ModuleChoice"]["required"] == ["class"] and set(schemas["ModuleChoice"]["properties"]) == {
        "class",
        "init",
        "inputs",
    }
    about = create["exported_program"]["description"]
    assert f"at most {MAX_EXPORTED_BYTES} bytes" in about and "loaded only inside the sandbox" in about
    assert "random values of the recorded example inputs' shapes and dtypes" in about
