"""The API's OpenAPI 3.1 document, generated: each operation's request body and query parameters
from its request model (webapp.jobs.api.requests, what the view validates with), its answers from
the response models (webapp.jobs.api.responses). Only the paths' words are written here."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from webapp.jobs.api import requests, responses

REF = "#/components/schemas/{model}"
MODELS: tuple[type[BaseModel], ...] = (
    requests.JobCreate,
    requests.EvaluateRequest,
    requests.BatchCreate,
    *(
        m
        for m in vars(responses).values()
        if isinstance(m, type)
        and issubclass(m, responses.Answer)
        and m is not responses.Answer
        and m.__module__ == responses.__name__
    ),
)


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def answer(model: type[BaseModel] | None, description: str = "OK", media: str = "application/json") -> dict[str, Any]:
    content = {"schema": ref(model)} if model else {}
    return {"description": description, "content": {media: content}}


def body(model: type[BaseModel]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(model)}}}


def query(model: type[requests.Request]) -> list[dict[str, Any]]:
    """The query parameters of a request model, one per field."""
    schema = model.model_json_schema(ref_template=REF)
    needed = set(schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in needed, "schema": field}
        for name, field in schema["properties"].items()
    ]


def path_param(name: str, kind: str = "integer") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": kind}}


ERRORS = {
    "401": answer(responses.Error, "no or invalid token"),
    "404": answer(responses.Error, "no such job, or not yours"),
}
BAD = answer(responses.Error, "the request does not fit its schema, or its task, files or options are invalid")
JOB_ID = path_param("job_id")
SHARE = {
    "name": "share",
    "in": "query",
    "required": False,
    "schema": {"type": "string"},
    "description": "a share token (read-only access)",
}
READ = [JOB_ID, SHARE]


def get(summary: str, ok: dict[str, Any], parameters: list[dict[str, Any]] = READ, **more: Any) -> dict[str, Any]:
    return {"summary": summary, "parameters": parameters, "responses": {"200": ok, **more, **ERRORS}}


@functools.cache
def paths() -> dict[str, Any]:
    r = responses
    return {
        "/api/jobs": {
            "get": get("List your jobs", answer(r.JobList), []),
            "post": {
                "summary": "Create a job (queued on the agent queue)",
                "requestBody": body(requests.JobCreate),
                "responses": {"201": answer(r.Job, "created"), "400": BAD, **ERRORS},
            },
        },
        "/api/jobs/{job_id}": {"get": get("Read a job", answer(r.Job))},
        "/api/jobs/{job_id}/turns": {
            "get": get(
                "Stored turns after index `since` (poll with the last index you have)",
                answer(r.TurnPage),
                [*READ, *query(requests.TurnsQuery)],
                **{"400": BAD},
            )
        },
        "/api/jobs/{job_id}/turns/{index}": {
            "get": get("One stored turn", answer(r.Turn), [*READ, path_param("index")])
        },
        "/api/jobs/{job_id}/progress": {"get": get("State, current step, last turn, best so far", answer(r.Progress))},
        "/api/jobs/{job_id}/cancel": {
            "post": {
                "summary": "Cancel (a running job stops after its current turn)",
                "parameters": [JOB_ID],
                "responses": {"200": answer(r.Job), **ERRORS},
            }
        },
        "/api/jobs/{job_id}/artifacts": {
            "get": get("Files of the best candidate and its evaluation", answer(r.Artifacts))
        },
        "/api/jobs/{job_id}/artifacts/best.zip": {
            "get": get(
                "The best candidate as a zip (with README and evaluation.json)", answer(None, "zip", "application/zip")
            )
        },
        "/api/jobs/{job_id}/artifacts/files/{path}": {
            "get": get(
                "One file of the best candidate",
                answer(None, "text", "text/plain"),
                [*READ, path_param("path", "string")],
            )
        },
        "/api/jobs/{job_id}/trajectory": {
            "get": get("The trajectory JSON (kernelwright.trajectory/1)", answer(r.Trajectory))
        },
        "/api/evaluations": {
            "get": get(
                "Your evaluations of one batch (without results)",
                answer(r.Batch),
                query(requests.BatchQuery),
                **{"400": answer(r.Error, "no batch given")},
            ),
            "post": {
                "summary": "Queue candidates against one task (asynchronous: 202 with ids; poll, or give a webhook)",
                "requestBody": body(requests.BatchCreate),
                "responses": {
                    "202": answer(r.Batch, "queued"),
                    "400": BAD,
                    "429": answer(r.Error, "over a quota (Retry-After)"),
                    **ERRORS,
                },
            },
        },
        "/api/evaluations/{evaluation_id}": {
            "get": get(
                "One evaluation: state, reward and, when done, its EvalResult",
                answer(r.Evaluation),
                [path_param("evaluation_id")],
            )
        },
        "/api/export": {
            "get": {
                "summary": "The jobs you may see as training rows (agent.export): sft, one row per run; rl, one row per turn",
                "parameters": query(requests.ExportQuery),
                "responses": {
                    "200": {
                        "description": "JSON Lines or parquet",
                        "content": {"application/jsonl": {}, "application/vnd.apache.parquet": {}},
                    },
                    "400": answer(r.Error, "a bad filter"),
                },
            }
        },
        "/api/evaluate": {
            "post": {
                "summary": "Evaluate a candidate against a task on the gpu queue (synchronous)",
                "description": "Waits for the result in the request (up to KERNELWRIGHT_API_EVALUATE_TIMEOUT, 900 s by "
                "default; as a coroutine, holding no web thread) and holds one of the caller's gpu places meanwhile "
                "(KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER, shared with their jobs and batches). For several "
                "candidates or long evaluations use POST /api/evaluations.",
                "requestBody": body(requests.EvaluateRequest),
                "responses": {
                    "200": answer(r.EvalResult, "the sandbox result, with reward"),
                    "400": BAD,
                    "429": answer(r.Queued, "all of the caller's gpu places are taken (Retry-After)"),
                    "503": answer(r.Error, "the queue's Redis does not answer (Retry-After)"),
                    "504": answer(r.Error, "timed out"),
                    **ERRORS,
                },
            }
        },
    }


@functools.cache
def components() -> dict[str, Any]:
    _, schemas = models_json_schema([(m, "validation") for m in MODELS], ref_template=REF)
    defs = schemas["$defs"]
    for model in (requests.JobCreate, requests.EvaluateRequest, requests.BatchCreate):
        # `options` is validated by services.normalize_options (for the form too): its schema is Options
        defs[model.__name__]["properties"]["options"] = {"anyOf": [ref(responses.Options), {"type": "null"}]}
    return defs


def openapi_schema(server: str = "") -> dict[str, Any]:
    """The document for this server. Its paths and components are made once per process (about
    15 ms) and shared by every call: read them, do not change them."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Kernelwright API",
            "version": "1",
            "description": "Jobs, their trajectories and one-off evaluations. Authenticate with "
            "`Authorization: Token <key>` (create keys on /account/tokens/).",
        },
        "servers": [{"url": server or "/"}],
        "security": [{"token": []}],
        "paths": paths(),
        "components": {
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "Authorization", "description": "`Token <key>`"}
            },
            "schemas": components(),
        },
    }
