"""One pydantic model per API request: the views validate with it and the OpenAPI document is
generated from it (webapp.jobs.api.openapi), so the two cannot drift.

A model checks a request's shape; what needs the task itself (the task check, a module spec, a
.pt2's archive, the candidate files' sizes and paths, the options' vocabulary) is checked after
it by the functions the pages use too. A shape error is answered in the API's words, not
pydantic's: each model names the message of each field (INVALID, by dotted path; the longest
prefix of the error's location wins) and, when its 400s are lists, the `error` they go under.
"""

from __future__ import annotations

from datetime import date
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from agent.export import FORMATS
from agent.exported_task import MAX_EXPORTED_BYTES
from webapp.jobs import evaluations
from webapp.jobs import models as db

Model = TypeVar("Model", bound="Request")
FILES = dict[str, str]


class BadRequest(Exception):
    """A request that does not fit its schema: a 400 with `error` (and `errors`)."""

    def __init__(self, error: str, errors: list[str] | None = None) -> None:
        super().__init__(error)
        self.error, self.errors = error, errors

    def body(self) -> dict[str, Any]:
        return {"error": self.error, **({"errors": self.errors} if self.errors is not None else {})}


class Request(BaseModel):
    """A request's declared schema; unknown fields are ignored, as they always were."""

    model_config = ConfigDict(populate_by_name=True)
    INVALID: ClassVar[dict[str, str]] = {}
    ERROR: ClassVar[str | None] = None  # the 400's `error` when the message goes under `errors`

    @classmethod
    def parse(cls: type[Model], data: Any) -> Model:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise cls.refusal(exc.errors()[0]) from exc

    @classmethod
    def refusal(cls, problem: Any) -> BadRequest:
        if problem["type"] == "refused":
            message = problem["msg"]
        else:
            path = [str(p) for p in problem["loc"]]
            prefixes = (".".join(path[:n]) for n in range(len(path), 0, -1))
            message = next((cls.INVALID[p] for p in prefixes if p in cls.INVALID), problem["msg"])
        return BadRequest(cls.ERROR, [message]) if cls.ERROR else BadRequest(message)


def refused(message: str) -> PydanticCustomError:
    """A refusal whose message is the API's (Request.refusal passes it on verbatim)."""
    return PydanticCustomError("refused", message)


class ModuleChoice(BaseModel):
    """Which nn.Module subclass of `source` to optimise, built into a KernelBench-format task
    (agent/module_task.py); the file is parsed, never imported, by the server."""

    model_config = ConfigDict(populate_by_name=True)
    class_: str = Field(alias="class", min_length=1, description="the class name, e.g. SEBlock")
    init: list[Any] | dict[str, Any] | None = Field(
        None, description="constructor arguments: an array (positional) or an object (keyword); default none"
    )
    inputs: list[str] | str | None = Field(
        None,
        description="one spec per input of forward() (or one string, one spec a line): DTYPE[DIMS] "
        "[DISTRIBUTION], e.g. float32[8,64,28,28] or int64[8,128] randint(0,50257)",
    )

    @field_validator("class_")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise refused('`module` must be an object with "class" (required), "init" and "inputs"')
        return value


class JobCreate(Request):
    """The task, as on the new-job form: `source` alone (a KernelBench-format module), `source`
    with `module` (any nn.Module class of it), or `exported_program` alone (a .pt2 file)."""

    ERROR = "invalid job"
    INVALID = {
        "source": "`source` must be the module's source text",
        "exported_program": "`exported_program` must be a .pt2 file (torch.export.save) as a base64 string",
        "module": '`module` must be an object with "class" (required), "init" and "inputs"',
        "module.init": "`module.init` must be a JSON array (positional) or object (keyword) of constructor arguments",
        "module.inputs": "`module.inputs` must be an array of input specs or one string of them, one per line",
        "options": "`options` must be an object",
    }
    name: str = Field("", description="default: the module docstring's first line, the class name, or 'exported'")
    source: str = Field(
        "",
        description="a KernelBench-format module (Model, get_inputs, get_init_inputs), or with "
        "`module` any Python file with nn.Module subclasses; at most 256 KiB",
    )
    exported_program: str | None = Field(
        None,
        json_schema_extra={"format": "byte"},
        description=f"an ExportedProgram saved with torch.export.save (a .pt2 file), base64 (line breaks allowed), "
        f"at most {MAX_EXPORTED_BYTES} bytes decoded; not with `source` or `module`. The server reads only the "
        "archive's table of contents and JSON graph; the file is loaded only inside the sandbox, and the task's "
        "inputs are random values of the recorded example inputs' shapes and dtypes (not the example values).",
    )
    module: ModuleChoice | None = None
    options: dict[str, Any] | None = None  # checked by services.normalize_options; documented as Options

    @field_validator("name", mode="before")
    @classmethod
    def _any_name(cls, value: Any) -> str:
        return str(value or "")

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("exported_program") is not None:
            if data.get("source", "") or data.get("module") is not None:
                raise refused(
                    "give `exported_program` alone: the task comes from the file, not from `source` or `module`"
                )
        return data


class EvaluateRequest(Request):
    """POST /api/evaluate: one candidate against a task."""

    INVALID = {
        "task": "`task` must be the reference module source",
        "files": evaluations.files_problem(None),  # the message of files of the wrong shape
        "options": "`options` must be an object",
    }
    task: str = Field(description="the reference module: at most 256 KiB, or a task made from a .pt2 (its size limit)")
    files: FILES = Field(description="relative path -> text (model_new.py, kernels/*.cu|*.cpp)")
    options: dict[str, Any] | None = None  # checked by services.normalize_options; documented as Options


class TurnsQuery(Request):
    """GET /api/jobs/{job_id}/turns: poll with the last index you have."""

    INVALID = {"since": "since must be an integer"}
    since: int = Field(-1, description="the turns after this index")


class Candidate(BaseModel):
    files: FILES


class BatchCreate(Request):
    """POST /api/evaluations: candidates against one task. Documented here; webapp.jobs.evaluations.parse
    validates it (with the batch limits, which are settings)."""

    task: str
    candidates: list[Candidate]
    options: dict[str, Any] | None = None  # checked by services.normalize_options; documented as Options
    webhook: str = Field("", description="an https URL called with each result (signed)")


class BatchQuery(Request):
    """GET /api/evaluations: the caller's evaluations of one batch."""

    batch: str = Field(description="the id a POST returned")


class ExportQuery(Request):
    """GET /api/export's filters. Documented here; webapp.jobs.views.export.ExportQuery.parse
    validates them (for the export page too)."""

    format: Literal[FORMATS] = "sft"  # type: ignore[valid-type]
    file: Literal["jsonl", "parquet"] = "jsonl"  # export.FILE_TYPES (test_api_schema checks they agree)
    task: str | None = Field(None, description="part of the job's name, or the start of its task_hash")
    min_reward: int | None = None
    since: date | None = None
    until: date | None = None
    visibility: Literal[("any", *db.Job.Visibility.values)] = "any"  # type: ignore[valid-type]
    mine: Literal["1", "true", "on"] | None = None
