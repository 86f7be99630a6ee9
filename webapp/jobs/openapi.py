"""The API's OpenAPI 3 schema, written by hand next to the views it describes (webapp.jobs.views.api).

Trajectory events are described by reference to their versioned schema (`kernelwright.trajectory/1`);
evaluation results (`kernelwright.eval/2`, sandbox/schema.py) by their top level and the paired-timing
fields (`speed`: the intervals), and the job's result by webapp.jobs.results.
"""

from __future__ import annotations

from typing import Any

from agent.exported_task import MAX_EXPORTED_BYTES
from agent.loop import MAX_TURNS_LIMIT
from sandbox.options import BACKENDS, PRECISIONS, PRESETS, TORCH_OPS
from sandbox.schema import SCHEMA_VERSION as EVAL_SCHEMA


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
            "/api/jobs/{job_id}/artifacts": {"get": {"summary": "Files of the best candidate and its evaluation", "parameters": [JOB_ID, SHARE], "responses": {"200": _json({"type": "object", "properties": {"best_version": {"type": "integer", "nullable": True}, "files": {"type": "array", "items": {"type": "object"}}, "evaluation": {**_ref("EvalResult"), "nullable": True}}}), **ERRORS}}},
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
            "/api/evaluations": {
                "get": {"summary": "Your evaluations of one batch (without results)",
                        "parameters": [{"name": "batch", "in": "query", "required": True, "schema": {"type": "string"}}],
                        "responses": {"200": _json({"type": "object"}), "400": _json(_ref("Error"), "no batch given"), **ERRORS}},
                "post": {
                    "summary": "Queue candidates against one task (asynchronous: 202 with ids; poll, or give a webhook)",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object", "required": ["task", "candidates"], "properties": {
                        "task": {"type": "string"}, "candidates": {"type": "array", "items": {"type": "object", "properties": {"files": {"type": "object", "additionalProperties": {"type": "string"}}}}},
                        "options": _ref("Options"), "webhook": {"type": "string", "description": "an https URL called with each result (signed)"}}}}}},
                    "responses": {"202": _json({"type": "object"}, "queued"), "400": _json(_ref("Error")), "429": _json(_ref("Error"), "over a quota (Retry-After)"), **ERRORS},
                },
            },
            "/api/evaluations/{evaluation_id}": {
                "get": {"summary": "One evaluation: state, reward and, when done, its EvalResult",
                        "parameters": [{"name": "evaluation_id", "in": "path", "required": True, "schema": {"type": "integer"}}],
                        "responses": {"200": _json({"type": "object", "properties": {"result": {**_ref("EvalResult"), "nullable": True}}}), **ERRORS}},
            },
            "/api/export": {
                "get": {
                    "summary": "The jobs you may see as training rows (agent.export): sft, one row per run; rl, one row per turn",
                    "parameters": [
                        {"name": name, "in": "query", "required": False, "schema": schema}
                        for name, schema in (("format", {"type": "string", "enum": ["sft", "rl"], "default": "sft"}),
                                             ("file", {"type": "string", "enum": ["jsonl", "parquet"], "default": "jsonl"}),
                                             ("task", {"type": "string"}), ("min_reward", {"type": "integer"}),
                                             ("since", {"type": "string", "format": "date"}), ("until", {"type": "string", "format": "date"}),
                                             ("visibility", {"type": "string", "enum": ["any", "private", "public"]}),
                                             ("mine", {"type": "string", "enum": ["1", "true", "on"]}))
                    ],
                    "responses": {"200": {"description": "JSON Lines or parquet", "content": {"application/jsonl": {}, "application/vnd.apache.parquet": {}}},
                                  "400": _json(_ref("Error"), "a bad filter")},
                }
            },
            "/api/evaluate": {
                "post": {
                    "summary": "Evaluate a candidate against a task on the gpu queue (synchronous)",
                    "description": "Waits for the result in the request (up to KERNELWRIGHT_API_EVALUATE_TIMEOUT, 900 s by default; as a coroutine, holding no web thread) and holds one of the caller's gpu places meanwhile (KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER, shared with their jobs and batches). For several candidates or long evaluations use POST /api/evaluations.",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("EvaluateRequest")}}},
                    "responses": {"200": _json(_ref("EvalResult"), "the sandbox result, with reward"), "400": _json(_ref("Error")),
                                  "429": _json(_ref("Error"), "all of the caller's gpu places are taken (Retry-After; `outstanding` and `limit` in the body)"),
                                  "503": _json(_ref("Error"), "the queue's Redis does not answer (Retry-After)"),
                                  "504": _json(_ref("Error"), "timed out"), **ERRORS},
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
                        "backend": {"type": "string", "enum": list(BACKENDS), "default": "auto"},
                        "policy": {"type": "string", "enum": ["builtin", "openai"], "default": "builtin"},
                        "max_turns": {"type": "integer", "minimum": 1, "maximum": MAX_TURNS_LIMIT, "default": 10},
                        "preset": {"type": "string", "enum": list(PRESETS), "default": "default"},
                        "torch_ops": {"type": "string", "enum": list(TORCH_OPS), "default": "forbid"},
                        "precision": {"type": "string", "enum": list(PRECISIONS), "default": "task",
                                      "description": "task keeps the task's dtypes; otherwise floating parameters, buffers and inputs are cast to it in the reference and the candidate"},
                    },
                },
                "JobCreate": {
                    "type": "object",
                    "description": "The task, as on the new-job form: `source` alone (a KernelBench-format module), `source` with `module` (any nn.Module class of it), or `exported_program` alone (a .pt2 file).",
                    "properties": {
                        "name": {"type": "string", "description": "default: the module docstring's first line, the class name, or 'exported'"},
                        "source": {"type": "string", "description": "a KernelBench-format module (Model, get_inputs, get_init_inputs), or with `module` any Python file with nn.Module subclasses; at most 256 KiB"},
                        "module": _ref("ModuleChoice"),
                        "exported_program": {
                            "type": "string", "format": "byte",
                            "description": f"an ExportedProgram saved with torch.export.save (a .pt2 file), base64 (line breaks allowed), at most {MAX_EXPORTED_BYTES} bytes decoded; not with `source` or `module`. The server reads only the archive's table of contents and JSON graph; the file is loaded only inside the sandbox, and the task's inputs are random values of the recorded example inputs' shapes and dtypes (not the example values).",
                        },
                        "options": _ref("Options"),
                    },
                },
                "ModuleChoice": {
                    "type": "object",
                    "required": ["class"],
                    "description": "Which nn.Module subclass of `source` to optimise, built into a KernelBench-format task (agent/module_task.py); the file is parsed, never imported, by the server.",
                    "properties": {
                        "class": {"type": "string", "description": "the class name, e.g. SEBlock"},
                        "init": {"oneOf": [{"type": "array", "items": {}}, {"type": "object"}], "description": "constructor arguments: an array (positional) or an object (keyword); default none"},
                        "inputs": {
                            "oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}],
                            "description": "one spec per input of forward() (or one string, one spec a line): DTYPE[DIMS] [DISTRIBUTION], e.g. float32[8,64,28,28] or int64[8,128] randint(0,50257)",
                        },
                    },
                },
                "Best": {
                    "type": "object",
                    "description": "the job's result: its best verified candidate as the stored evaluation measured it (the same number the pages and the zip README show)",
                    "properties": {
                        "version": {"type": "integer", "nullable": True},
                        "reward": {"type": "integer", "nullable": True},
                        "speedup_vs_eager": {"type": "number", "nullable": True, "description": "the median per-round paired ratio (eval/2); an older result's bare ratio"},
                        "speedup_vs_compile": {"type": "number", "nullable": True},
                        "confirmed": {"type": "boolean", "description": "the evaluation is the loop's final one (the median of the best's evaluations after the last turn)"},
                        "result": {**_ref("Result"), "nullable": True},
                    },
                },
                "SpeedupView": {
                    "type": "object",
                    "description": "the candidate against one baseline, timed in the same paired rounds",
                    "properties": {
                        "baseline": {"type": "string", "enum": ["eager", "compile"]},
                        "ratio": {"type": "number", "description": "median over the rounds of baseline / candidate (above 1: faster)"},
                        "ci_low": {"type": "number", "nullable": True, "description": "bootstrap 95% interval, lower end (null: no interval recorded, a result before eval/2)"},
                        "ci_high": {"type": "number", "nullable": True},
                        "rounds": {"type": "integer", "nullable": True},
                        "verdict": {"type": "string", "enum": ["faster", "slower", "no measurable difference", ""], "description": "faster only when ci_low > 1; an interval holding 1.0 is 'no measurable difference'; '' without an interval"},
                        "text": {"type": "string", "description": "e.g. '1.42x vs eager (95% interval 1.37-1.48x, 12 paired rounds)'"},
                    },
                },
                "Speed": {
                    "type": "object",
                    "properties": {
                        "vs_eager": {**_ref("SpeedupView"), "nullable": True},
                        "vs_compile": {**_ref("SpeedupView"), "nullable": True},
                        "has_interval": {"type": "boolean"},
                        "noisy": {"type": "boolean", "description": "the timing window was noisy: no speed milestone was given"},
                        "milestone": {"type": "string", "description": "why the reward is what it is (the sandbox's words)"},
                        "text": {"type": "string"},
                    },
                },
                "Result": {
                    "allOf": [_ref("Speed")],
                    "type": "object",
                    "properties": {
                        "version": {"type": "integer"},
                        "reward": {"type": "integer", "nullable": True},
                        "confirmed": {"type": "boolean"},
                        "schema": {"type": "string", "description": "the evaluation's schema, e.g. " + EVAL_SCHEMA},
                        "text": {"type": "string", "description": "e.g. 'reward 3 · 1.42x vs eager (95% interval 1.37-1.48x, 12 paired rounds) · ...'"},
                    },
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
                        "speed": _ref("Speed"),
                        "has_error": {"type": "boolean"},
                        "improved": {"type": "boolean"},
                        "prompt_tokens": {"type": "integer"},
                        "completion_tokens": {"type": "integer"},
                        "cost_usd": {"type": "number"},
                        "created_at": {"type": "string", "format": "date-time"},
                        "events": {"type": "array", "items": {"type": "object"}, "description": "kernelwright.trajectory/1 events of this turn"},
                        "evaluation": {**_ref("EvalResult"), "nullable": True, "description": "the turn's last evaluation"},
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
                        "task": {"type": "string", "description": "the reference module: at most 256 KiB, or a task made from a .pt2 (its size limit)"},
                        "files": {"type": "object", "additionalProperties": {"type": "string"}, "description": "relative path -> text (model_new.py, kernels/*.cu|*.cpp)"},
                        "options": _ref("Options"),
                    },
                },
                "EvalResult": {
                    "type": "object",
                    "description": EVAL_SCHEMA + " (sandbox/schema.py EvalResult.to_dict()); the fields a client needs for speed are listed",
                    "properties": {
                        "schema": {"type": "string", "enum": [EVAL_SCHEMA]},
                        "status": {"type": "string", "enum": ["ok", "incorrect", "rejected", "compile_error", "runtime_error", "timeout"]},
                        "reward": {"type": "integer", "description": "-1, 1, 2, 3; 'faster' judged on the intervals' lower ends against 1.05; 1 on a noisy window"},
                        "task_hash": {"type": "string", "description": "sandbox.cache.sha256_text of the task source; the same as the job's task_hash"},
                        "speedup_vs_eager": {"type": "number", "nullable": True},
                        "speedup_vs_compile": {"type": "number", "nullable": True},
                        "speed": {"type": "object", "nullable": True, "properties": {
                            "vs_eager": {**_ref("Speedup"), "nullable": True},
                            "vs_compile": {**_ref("Speedup"), "nullable": True},
                            "rounds": {"type": "integer"},
                            "noise": {"type": "number"}, "noise_limit": {"type": "number"}, "noisy": {"type": "boolean"},
                            "verdict": {"type": "string"}, "milestone": {"type": "string"},
                        }},
                    },
                },
                "Speedup": {
                    "type": "object",
                    "description": "sandbox.schema.Speedup",
                    "properties": {
                        "baseline": {"type": "string"}, "ratio": {"type": "number"}, "ci_low": {"type": "number"}, "ci_high": {"type": "number"},
                        "rounds": {"type": "integer"}, "verdict": {"type": "string", "enum": ["faster", "slower", "no measurable difference"]},
                        "per_round": {"type": "array", "items": {"type": "number"}},
                    },
                },
            },
        },
    }
