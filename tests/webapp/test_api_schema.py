"""The OpenAPI document is generated from the schemas the views validate with and the models
their answers fit (webapp.jobs.api): every route is in it with its request schema, the views'
JSON fits the response models, and a body the schema refuses is a 400 in the API's words."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import get_resolver

from webapp.jobs.api import requests, responses
from webapp.jobs.importer import import_trajectory
from webapp.jobs.models import ApiToken
from webapp.jobs.sample_trajectory import SOFTMAX_TASK, build

pytestmark = pytest.mark.django_db
BODIES = {
    ("/api/jobs", "post"): requests.JobCreate,
    ("/api/evaluate", "post"): requests.EvaluateRequest,
    ("/api/evaluations", "post"): requests.BatchCreate,
}
QUERIES = {
    ("/api/jobs/{job_id}/turns", "get"): requests.TurnsQuery,
    ("/api/evaluations", "get"): requests.BatchQuery,
    ("/api/export", "get"): requests.ExportQuery,
}


@pytest.fixture
def document() -> dict:
    return Client().get("/api/openapi.json").json()


@pytest.fixture
def api() -> Client:
    """A client with a token of a new user's (its .owner)."""
    owner = User.objects.create_user("schema-owner", password="pw-schema-123")
    client = Client(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(owner, 'test')[1]}")
    client.owner = owner  # type: ignore[attr-defined]
    return client


def api_routes() -> set[str]:
    routes = set()
    for pattern in get_resolver().url_patterns:
        for sub in getattr(pattern, "url_patterns", []):
            route = str(sub.pattern)
            if route.startswith("api/") and route != "api/openapi.json":
                routes.add("/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route))
    return routes


def fields(model) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def test_every_route_is_documented_with_its_request_schema(document):
    assert api_routes() == set(document["paths"])
    schemas = document["components"]["schemas"]
    for (path, method), model in BODIES.items():
        ref = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{model.__name__}"
        assert set(schemas[model.__name__]["properties"]) == fields(model), path
    for (path, method), model in QUERIES.items():
        params = {p["name"] for p in document["paths"][path][method]["parameters"] if p["in"] == "query"}
        assert fields(model) <= params, path
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            for ref in re.findall(r"#/components/schemas/(\w+)", str(op)):
                assert ref in schemas, (path, ref)
            takes_a_body = method == "post" and not path.endswith("/cancel")
            assert ("requestBody" in op) == takes_a_body == ((path, method) in BODIES), (path, method)


def test_options_are_documented_from_the_one_vocabulary(document):
    from sandbox.options import BACKENDS, TORCH_OPS

    options = document["components"]["schemas"]["Options"]["properties"]
    assert options["backend"]["enum"] == list(BACKENDS) and options["torch_ops"]["enum"] == list(TORCH_OPS)
    job_create = document["components"]["schemas"]["JobCreate"]["properties"]["options"]
    assert {"$ref": "#/components/schemas/Options"} in job_create["anyOf"]


def test_the_views_json_fits_the_response_models(api):
    job = import_trajectory(api.owner, build(turns=3))
    base = f"/api/jobs/{job.pk}"
    for url, model in (
        (base, responses.Job),
        ("/api/jobs", responses.JobList),
        (f"{base}/turns", responses.TurnPage),
        (f"{base}/turns/2", responses.Turn),
        (f"{base}/progress", responses.Progress),
        (f"{base}/artifacts", responses.Artifacts),
        (f"{base}/trajectory", responses.Trajectory),
    ):
        resp = api.get(url)
        assert resp.status_code == 200, url
        model.model_validate(resp.json())  # raises when a view's JSON lacks or mistypes a documented field
        if model is not responses.Trajectory:  # a trajectory file carries more than a client needs
            assert set(resp.json()) <= fields(model), (url, set(resp.json()) - fields(model))
    refused = api.get(f"{base}/turns", {"since": "x"})
    responses.Error.model_validate(refused.json())


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"source": 7}, "`source` must be the module's source text"),
        ({"source": SOFTMAX_TASK, "module": "SEBlock"}, '`module` must be an object with "class"'),
        ({"source": SOFTMAX_TASK, "module": {"class": " "}}, '`module` must be an object with "class"'),
        ({"source": SOFTMAX_TASK, "module": {"class": "Model", "init": 3}}, "`module.init` must be a JSON array"),
        ({"source": SOFTMAX_TASK, "module": {"class": "Model", "inputs": [1]}}, "`module.inputs` must be an array"),
        ({"source": SOFTMAX_TASK, "options": "cpu"}, "`options` must be an object"),
    ],
)
def test_a_job_the_schema_refuses_is_a_400_in_the_apis_words(api, body, says):
    resp = api.post("/api/jobs", body, content_type="application/json")
    assert resp.status_code == 400 and resp.json() == {"error": "invalid job", "errors": [resp.json()["errors"][0]]}
    assert resp.json()["errors"][0].startswith(says)


def test_an_evaluation_the_schema_refuses_is_a_400_in_the_apis_words(api):
    resp = api.post(
        "/api/evaluate", {"task": SOFTMAX_TASK, "files": {"model_new.py": 1}}, content_type="application/json"
    )
    assert resp.status_code == 400 and resp.json() == {"error": "`files` must be an object of relative path -> text"}
    resp = api.post(
        "/api/evaluate",
        {"task": SOFTMAX_TASK, "files": {"model_new.py": "x"}, "options": []},
        content_type="application/json",
    )
    assert resp.status_code == 400 and resp.json() == {"error": "`options` must be an object"}


def test_the_documented_export_filters_are_the_ones_it_takes(document):
    from agent.export import FORMATS
    from webapp.jobs.views.export import FILE_TYPES, VISIBILITIES

    params = {p["name"]: p["schema"] for p in document["paths"]["/api/export"]["get"]["parameters"]}
    assert params["format"]["enum"] == list(FORMATS) and params["file"]["enum"] == list(FILE_TYPES)
    assert params["visibility"]["enum"] == list(VISIBILITIES)
