"""The API's OpenAPI 3 schema, written by hand next to the views it describes (webapp.jobs.views.api).

Trajectory events and evaluation results are described by reference to their versioned schemas
(`kernelwright.trajectory/1`, `kernelwright.eval/1`) rather than duplicated here.
"""

from __future__ import annotations

from typing import Any


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "401": _json(_ref("Error"), "no or invalid token"),
    "404": _json(_ref("Error"), "no such job, or not yours"),
}
JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "integer"}}
SHARE = {"name": "share", "in": "query", "required": False, "schema": {"type": "string"}, "description": "a share token (read-only access)"}


def openapi_schema(server: str = "") -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Kernelwright API",
            "version": "1",
            "description": "Jobs, their trajectories and one-off evaluations. Authenticate with `Authorization: Token <key>` (create keys on /account/tokens/).",
        },
        "servers": [{"url": server or "/"}],
        "security": [{"token": []}],
        "paths": {
            "/api/jobs": {
                "get": {"summary": "List your jobs", "responses": {"200": _json({"type": "object", "properties": {"jobs": {"type": "array", "items": _ref("Job")}}}), **ERRORS}},
                "post": {
                    "summary": "Create a job (queued on the agent queue)",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("JobCreate")}}},
                    "responses": {"201": _json(_ref("Job"), "created"), "400": _json(_ref("Error"), "invalid task or options"), **ERRORS},
                },
            },
            "/api/jobs/{job_id}": {"get": {"summary": "Read a job", "parameters": [JOB_ID, SHARE], "responses": {"200": _json(_ref("Job")), **ERRORS}}},
            "/api/jobs/{job_id}/turns": {
                "get": {
                    "summary": "Stored turns after index `since` (poll with the last index you have)",
                    "parameters": [JOB_ID, SHARE, {"name": "since", "in": "query", "schema": {"type": "integer", "default": -1}}],
                    "responses": {"200": _json(_ref("TurnPage")), **ERRORS},
                }
            },
            "/api/jobs/{job_id}/turns/{index}": {
                "get": {
                    "summary": "One stored turn",
                    "parameters": [JOB_ID, SHARE, {"name": "index", "in": "path", "required": True, "schema": {"type": "integer"}}],
                    "responses": {"200": _json(_ref("Turn")), **ERRORS},
                }
            },
            "/api/jobs/{job_id}/progress": {"get": {"summary": "State, current step, last turn, best so far", "parameters": [JOB_ID, SHARE], "responses": {"200": _json(_ref("Progress")), **ERRORS}}},
            "/api/jobs/{job_id}/cancel": {"post": {"summary": "Cancel (a running job stops after its current turn)", "parameters": [JOB_ID], "responses": {"200": _json(_ref("Job")), **ERRORS}}},
            "/api/jobs/{job_id}/artifacts": {"get": {"summary": "Files of the best candidate and its evaluation", "parameters": [JOB_ID, SHARE], "responses": {"200": _json({"type": "object"}), **ERRORS}}},
            "/api/jobs/{job_id}/artifacts/best.zip": {
                "get": {"summary": "The best candidate as a zip (with README and evaluation.json)", "parameters": [JOB_ID, SHARE], "responses": {"200": {"description": "zip", "content": {"application/zip": {}}}, **ERRORS}}
            },
            "/api/jobs/{job_id}/artifacts/files/{path}": {
                "get": {
                    "summary": "One file of the best candidate",
                    "parameters": [JOB_ID, SHARE, {"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "text", "content": {"text/plain": {}}}, **ERRORS},
                }
            },
            "/api/jobs/{job_id}/trajectory": {"get": {"summary": "The trajectory JSON (kernelwright.trajectory/1)", "parameters": [JOB_ID, SHARE], "responses": {"200": _json(_ref("Trajectory")), **ERRORS}}},
            "/api/evaluate": {
                "post": {
                    "summary": "Evaluate a candidate against a task on the gpu queue (synchronous)",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("EvaluateRequest")}}},
                    "responses": {"200": _json(_ref("EvalResult"), "the sandbox result, with reward"), "400": _json(_ref("Error")), "504": _json(_ref("Error"), "timed out"), **ERRORS},
                }
            },
        },
        "components": {
            "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "Authorization", "description": "`Token <key>`"}},
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "string"}, "errors": {"type": "array", "items": {"type": "string"}}}},
                "Options": {
                    "type": "object",
                    "properties": {
                        "backend": {"type": "string", "enum": ["auto", "cpu", "cuda"], "default": "auto"},
                        "policy": {"type": "string", "enum": ["builtin", "openai"], "default": "builtin"},
                        "max_turns": {"type": "integer", "minimum": 1, "maximum": 200, "default": 10},
                        "preset": {"type": "string", "enum": ["default", "kernelbench", "cuda-agent"], "default": "default"},
                        "torch_ops": {"type": "string", "enum": ["forbid", "allow"], "default": "forbid"},
                    },
                },
                "JobCreate": {
                    "type": "object",
                    "required": ["source"],
                    "properties": {"name": {"type": "string"}, "source": {"type": "string", "description": "KernelBench-format module: Model, get_inputs, get_init_inputs"}, "options": _ref("Options")},
                },
                "Best": {
                    "type": "object",
                    "properties": {"version": {"type": "integer", "nullable": True}, "reward": {"type": "integer", "nullable": True}, "speedup_vs_eager": {"type": "number", "nullable": True}, "speedup_vs_compile": {"type": "number", "nullable": True}},
                },
                "Job": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "name": {"type": "string"},
                        "state": {"type": "string", "enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
                        "reason": {"type": "string"},
                        "step": {"type": "string"},
                        "options": _ref("Options"),
                        "origin": {"type": "string", "enum": ["run", "imported", "gallery"]},
                        "visibility": {"type": "string", "enum": ["private", "public"]},
                        "gallery": {"type": "boolean"},
                        "task_hash": {"type": "string"},
                        "created_at": {"type": "string", "format": "date-time"},
                        "started_at": {"type": "string", "format": "date-time", "nullable": True},
                        "finished_at": {"type": "string", "format": "date-time", "nullable": True},
                        "cancel_requested": {"type": "boolean"},
                        "best": _ref("Best"),
                        "summary": {"type": "string"},
                        "turns": {"type": "integer"},
                    },
                },
                "Turn": {
                    "type": "object",
                    "properties": {
                        "index": {"type": "integer"},
                        "reward": {"type": "integer", "nullable": True},
                        "speedup_vs_eager": {"type": "number", "nullable": True},
                        "speedup_vs_compile": {"type": "number", "nullable": True},
                        "has_error": {"type": "boolean"},
                        "improved": {"type": "boolean"},
                        "prompt_tokens": {"type": "integer"},
                        "completion_tokens": {"type": "integer"},
                        "cost_usd": {"type": "number"},
                        "created_at": {"type": "string", "format": "date-time"},
                        "events": {"type": "array", "items": {"type": "object"}, "description": "kernelwright.trajectory/1 events of this turn"},
                        "evaluation": {"type": "object", "nullable": True, "description": "kernelwright.eval/1 result"},
                    },
                },
                "TurnPage": {
                    "type": "object",
                    "properties": {
                        "job": {"type": "integer"},
                        "state": {"type": "string"},
                        "since": {"type": "integer"},
                        "turns": {"type": "array", "items": _ref("Turn")},
                        "last_index": {"type": "integer"},
                        "more": {"type": "boolean"},
                    },
                },
                "Progress": {
                    "type": "object",
                    "properties": {
                        "state": {"type": "string"},
                        "step": {"type": "string"},
                        "reason": {"type": "string"},
                        "last_turn": {"type": "integer", "nullable": True},
                        "turns": {"type": "integer"},
                        "elapsed_s": {"type": "number", "nullable": True},
                        "cancel_requested": {"type": "boolean"},
                        "best": _ref("Best"),
                    },
                },
                "Trajectory": {"type": "object", "properties": {"schema": {"type": "string", "enum": ["kernelwright.trajectory/1"]}, "events": {"type": "array", "items": {"type": "object"}}}},
                "EvaluateRequest": {
                    "type": "object",
                    "required": ["task", "files"],
                    "properties": {
                        "task": {"type": "string"},
                        "files": {"type": "object", "additionalProperties": {"type": "string"}, "description": "relative path -> text (model_new.py, kernels/*.cu|*.cpp)"},
                        "options": _ref("Options"),
                    },
                },
                "EvalResult": {"type": "object", "description": "kernelwright.eval/1 (sandbox/schema.py EvalResult.to_dict())", "properties": {"schema": {"type": "string"}, "status": {"type": "string"}, "reward": {"type": "integer"}}},
            },
        },
    }
