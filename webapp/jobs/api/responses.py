"""The API's answers as pydantic models: the OpenAPI document's response schemas are generated
from them (webapp.jobs.api.openapi), and tests/webapp/test_api_schema.py checks that the views'
JSON (job_json, turn_json, ...) fits them.

Evaluation results (`kernelwright.eval/2`, sandbox/schema.py) are described by their top level
and the paired-timing fields (`speed`: the intervals), trajectory events by reference to their
versioned schema (`kernelwright.trajectory/1`), the job's result by webapp.jobs.results.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.loop import MAX_TURNS_LIMIT
from sandbox.options import BACKENDS, PRECISIONS, PRESETS, TORCH_OPS
from sandbox.schema import SCHEMA_VERSION as EVAL_SCHEMA
from webapp.jobs import models as db
from webapp.jobs.services import POLICIES

EVAL_STATUSES = ("ok", "incorrect", "rejected", "compile_error", "runtime_error", "timeout")
VERDICTS = ("faster", "slower", "no measurable difference")


class Answer(BaseModel):
    """A response body: it may carry more than the fields a client needs (listed here)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Error(Answer):
    error: str
    errors: list[str] | None = None


class Options(Answer):
    """A job's or evaluation's options (webapp.jobs.services.normalize_options checks them)."""

    backend: Literal[BACKENDS] = "auto"  # type: ignore[valid-type]
    policy: Literal[POLICIES] = "builtin"  # type: ignore[valid-type]
    max_turns: int = Field(10, ge=1, le=MAX_TURNS_LIMIT)
    preset: Literal[tuple(PRESETS)] = "default"  # type: ignore[valid-type]
    torch_ops: Literal[TORCH_OPS] = "forbid"  # type: ignore[valid-type]
    precision: Literal[PRECISIONS] = Field(  # type: ignore[valid-type]
        "task",
        description="task keeps the task's dtypes; otherwise floating parameters, buffers and inputs are "
        "cast to it in the reference and the candidate",
    )


class Speedup(Answer):
    """sandbox.schema.Speedup"""

    baseline: str
    ratio: float
    ci_low: float
    ci_high: float
    rounds: int
    verdict: Literal[VERDICTS]  # type: ignore[valid-type]
    per_round: list[float] = []


class EvalSpeed(Answer):
    vs_eager: Speedup | None = None
    vs_compile: Speedup | None = None
    rounds: int | None = None
    noise: float | None = None
    noise_limit: float | None = None
    noisy: bool | None = None
    verdict: str | None = None
    milestone: str | None = None


class EvalResult(Answer):
    __doc__ = f"{EVAL_SCHEMA} (sandbox/schema.py EvalResult.to_dict()); the fields a client needs for speed are listed"

    schema_: Literal[EVAL_SCHEMA] = Field(alias="schema", json_schema_extra={"enum": [EVAL_SCHEMA]})  # type: ignore[valid-type]
    status: Literal[EVAL_STATUSES]  # type: ignore[valid-type]
    reward: int = Field(
        description="-1, 1, 2, 3; 'faster' judged on the intervals' lower ends against 1.05; on a noisy window on its worst pairing of rounds"
    )
    task_hash: str = Field(description="sandbox.cache.sha256_text of the task source; the same as the job's task_hash")
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speed: EvalSpeed | None = None


class SpeedupView(Answer):
    """the candidate against one baseline, timed in the same paired rounds"""

    baseline: Literal["eager", "compile"]
    ratio: float = Field(description="median over the rounds of baseline / candidate (above 1: faster)")
    ci_low: float | None = Field(
        description="bootstrap 95% interval, lower end (null: no interval recorded, a result before eval/2)"
    )
    ci_high: float | None
    rounds: int | None
    verdict: Literal[(*VERDICTS, "")] = Field(  # type: ignore[valid-type]
        description="faster only when ci_low > 1; an interval holding 1.0 is 'no measurable difference'; '' without "
        "an interval"
    )
    text: str = Field(description="e.g. '1.42x vs eager (95% interval 1.37-1.48x, 12 paired rounds)'")


class Speed(Answer):
    vs_eager: SpeedupView | None
    vs_compile: SpeedupView | None
    has_interval: bool
    noisy: bool = Field(
        description="the timing window was noisy: the milestone was judged on its worst pairing of rounds, not the interval"
    )
    milestone: str = Field(description="why the reward is what it is (the sandbox's words)")
    text: str


class Result(Speed):
    version: int
    reward: int | None
    confirmed: bool
    schema_: str = Field(alias="schema", description=f"the evaluation's schema, e.g. {EVAL_SCHEMA}")
    text: str = Field(description="e.g. 'reward 3 · 1.42x vs eager (95% interval 1.37-1.48x, 12 paired rounds) · ...'")


class Best(Answer):
    """the job's result: its best verified candidate as the stored evaluation measured it (the same
    number the pages and the zip README show)"""

    version: int | None
    reward: int | None
    speedup_vs_eager: float | None = Field(
        description="the median per-round paired ratio (eval/2); an older result's bare ratio"
    )
    speedup_vs_compile: float | None
    confirmed: bool = Field(
        description="the evaluation is the loop's final one (the median of the best's evaluations after the last turn)"
    )
    result: Result | None


class Job(Answer):
    id: int
    name: str
    state: Literal[tuple(db.Job.State.values)]  # type: ignore[valid-type]
    reason: str
    step: str
    options: Options
    origin: Literal[tuple(db.Job.Origin.values)]  # type: ignore[valid-type]
    visibility: Literal[tuple(db.Job.Visibility.values)]  # type: ignore[valid-type]
    gallery: bool
    task_hash: str
    created_at: str = Field(json_schema_extra={"format": "date-time"})
    started_at: str | None = Field(json_schema_extra={"format": "date-time"})
    finished_at: str | None = Field(json_schema_extra={"format": "date-time"})
    cancel_requested: bool
    best: Best
    summary: str
    turns: int


class JobList(Answer):
    jobs: list[Job]


class Turn(Answer):
    index: int
    reward: int | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    speed: Speed
    has_error: bool
    improved: bool
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    created_at: str = Field(json_schema_extra={"format": "date-time"})
    events: list[dict[str, Any]] = Field([], description="kernelwright.trajectory/1 events of this turn")
    evaluation: EvalResult | None = Field(None, description="the turn's last evaluation")


class TurnPage(Answer):
    job: int
    state: str
    since: int
    turns: list[Turn]
    last_index: int
    more: bool


class Progress(Answer):
    state: str
    step: str
    reason: str
    last_turn: int | None
    turns: int
    elapsed_s: float | None
    cancel_requested: bool
    best: Best


class ArtifactFile(Answer):
    path: str
    bytes: int
    version: int


class Artifacts(Answer):
    best_version: int | None
    files: list[ArtifactFile]
    evaluation: EvalResult | None


class Trajectory(Answer):
    schema_: Literal["kernelwright.trajectory/1"] = Field(alias="schema")
    events: list[dict[str, Any]]


class Webhook(Answer):
    url: str
    status: str


class Evaluation(Answer):
    """One evaluation of a batch (webapp.jobs.views.batch.evaluation_json)."""

    id: int
    batch: str
    index: int
    state: Literal[tuple(db.Evaluation.State.values)]  # type: ignore[valid-type]
    status: Literal[EVAL_STATUSES] | None = Field(description="the result's status, when done")  # type: ignore[valid-type]
    reward: int | None
    reason: str
    href: str
    task_hash: str
    options: dict[str, Any]
    created_at: str = Field(json_schema_extra={"format": "date-time"})
    webhook: Webhook | None
    result: EvalResult | None = Field(None, description="when done (not in a batch's listing)")


class Batch(Answer):
    batch: str
    evaluations: list[Evaluation]
    webhook_secret: str | None = Field(
        None, description="shown once, on the POST with a webhook: verifies X-Kernelwright-Signature"
    )


class Queued(Answer):
    """The 429's body of POST /api/evaluate: how many of the caller's gpu places are taken."""

    error: str
    outstanding: int
    limit: int
