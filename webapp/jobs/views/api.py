"""The JSON API: plain Django views; each request is validated by its declared schema
(webapp.jobs.api.requests), from which with the response models the OpenAPI document is
generated (webapp.jobs.api.openapi).

Authentication: `Authorization: Token <key>` for everything; a browser session also works for
reads. Writes need a token (the API is CSRF-exempt, so a session must not be enough to write).
Reads accept `?share=<token>` like the pages. Permissions are the pages' (webapp.jobs.permissions).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from redis.exceptions import RedisError

from sandbox.options import SANDBOX_OPTION_KEYS
from webapp.jobs import evaluations, scheduler, services
from webapp.jobs.api.openapi import openapi_schema
from webapp.jobs.api.requests import BadRequest, EvaluateRequest, JobCreate, TurnsQuery
from webapp.jobs.models import ApiToken, Job, Turn
from webapp.jobs.module_wrapper import MAX_EXPORTED_BYTES, SpecError, exported_task_source, task_from_module
from webapp.jobs.permissions import can_change, can_view, visible_jobs
from webapp.jobs.task_check import TOO_DEEP, check_task_source
from webapp.jobs.views import files as file_views
from webapp.jobs.views.access import share_token
from webapp.queues import EVALUATE_TASK

SAFE = ("GET", "HEAD", "OPTIONS")
EVALUATE_RETRY_AFTER_S = 30  # about one CPU evaluation: by then one of the caller's places is likely free
TURN_PAGE = 200
EVALUATE_POLL_S = 0.25  # how often a waiting POST /api/evaluate looks for its result


def error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def bad_request(exc: BadRequest) -> JsonResponse:
    return JsonResponse(exc.body(), status=400)


def token_user(request):
    """The user of a valid token; None when no token header; False for a bad token."""
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "token" or not key.strip():
        return False
    token = ApiToken.objects.select_related("user").filter(key_hash=ApiToken.hash_key(key.strip())).first()
    if token is None or not token.user.is_active:
        return False
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


def _admit(request, methods: tuple[str, ...], auth_required: bool) -> JsonResponse | None:
    """The method and token checks of every API view: None when the request may go on (with
    request.api_user set), else the error answer."""
    if request.method not in methods:
        return error(405, f"method {request.method} not allowed", allowed=list(methods))
    user = token_user(request)
    if user is False:
        return error(401, "invalid token")
    if user is None:
        user = request.user if request.method in SAFE else None
        if user is not None:
            user.is_authenticated  # noqa: B018 - resolve the lazy session user here (async views cannot later)
    request.api_user = user
    if auth_required and (user is None or not user.is_authenticated):
        return error(401, "authentication required: send `Authorization: Token <key>`")
    return None


def api_view(methods: tuple[str, ...], auth_required: bool = True):
    """An API view: csrf-exempt, token or session auth, the allowed methods. An async view stays
    async (it can wait for a result without holding a web thread)."""

    def wrap(view):
        if asyncio.iscoroutinefunction(view):

            @csrf_exempt
            @functools.wraps(view)
            async def ainner(request, *args, **kwargs):
                refused = await sync_to_async(_admit)(request, methods, auth_required)
                return refused if refused is not None else await view(request, *args, **kwargs)

            return ainner

        @csrf_exempt
        @functools.wraps(view)
        def inner(request, *args, **kwargs):
            refused = _admit(request, methods, auth_required)
            return refused if refused is not None else view(request, *args, **kwargs)

        return inner

    return wrap


def _job_for(request, job_id: int, change: bool = False) -> Job | JsonResponse:
    """The job if this caller may read (or change) it. Reads need no account for public jobs and
    share links, like the pages; otherwise an anonymous caller gets 401, a signed-in one 404."""
    job = Job.objects.filter(pk=job_id).first()
    user = request.api_user
    allowed = job is not None and (can_change(user, job) if change else can_view(user, job, share_token(request)))
    if allowed:
        return job
    if user is None or not user.is_authenticated:
        return error(401, "authentication required: send `Authorization: Token <key>`")
    return error(404, "no such job")


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.pk,
        "name": job.name,
        "state": job.state,
        "reason": job.reason,
        "step": job.step,
        "options": job.options,
        "origin": job.origin,
        "visibility": job.visibility,
        "gallery": job.gallery,
        "task_hash": job.task_hash,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "cancel_requested": job.cancel_requested,
        "best": best_json(job),
        "summary": job.summary,
        "turns": job.turns.count(),
    }


def best_json(job: Job) -> dict[str, Any]:
    """The job's result (Job.result(): what the pages and the README show): the bare numbers, and
    under `result` the confirmation and the paired intervals in numbers and in words."""
    result = job.result()
    return {
        "version": job.best_version,
        "reward": job.best_reward,
        "speedup_vs_eager": job.best_speedup_eager,
        "speedup_vs_compile": job.best_speedup_compile,
        "confirmed": job.best_confirmed,
        "result": result.to_dict() if result else None,
    }


def turn_json(turn: Turn, with_events: bool = True) -> dict[str, Any]:
    data = {
        "index": turn.index,
        "reward": turn.reward,
        "speedup_vs_eager": turn.speedup_eager,
        "speedup_vs_compile": turn.speedup_compile,
        "speed": turn.report().to_dict(),
        "has_error": turn.has_error,
        "improved": turn.improved,
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "cost_usd": turn.cost_usd,
        "created_at": turn.created_at.isoformat(),
    }
    if with_events:
        data["events"] = turn.events
        data["evaluation"] = turn.evaluation
    return data


def _json_body(request) -> dict[str, Any] | JsonResponse:
    try:
        body = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "the body is not JSON")
    except TOO_DEEP:
        return error(400, "the body is nested too deeply")
    if not isinstance(body, dict):
        return error(400, "the body must be a JSON object")
    return body


@api_view(("GET",), auth_required=False)
def openapi(request):
    return JsonResponse(openapi_schema(request.build_absolute_uri("/").rstrip("/")))


@api_view(("GET", "POST"))
def jobs(request):
    if request.method == "GET":
        items = visible_jobs(request.api_user)[:200]
        return JsonResponse({"jobs": [job_json(j) for j in items]})
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        new = JobCreate.parse(body)
    except BadRequest as exc:
        return bad_request(exc)
    task = job_task(new)
    if isinstance(task, JsonResponse):
        return task
    source, name = task
    try:
        job = services.create_job(request.api_user, name, source, new.options or {})
    except services.InvalidJob as exc:
        return error(400, "invalid job", errors=exc.errors)
    return JsonResponse(job_json(job), status=201)


def invalid_job(message: str) -> JsonResponse:
    return error(400, "invalid job", errors=[message])


def job_task(new: JobCreate) -> tuple[str, str] | JsonResponse:
    """(task source, job name) of a new job, made as the form makes it: `source` as it is (a
    KernelBench-format task), `source` + `module` (any nn.Module class of it: agent.module_task)
    or `exported_program` (a .pt2, base64: agent.exported_task). JobCreate has checked the shape."""
    if new.exported_program is not None:
        return exported_job_task(new.exported_program, new.name)
    if new.module is None:
        return new.source, new.name
    module = new.module
    try:
        task = task_from_module(new.source, module.class_, module.init, module.inputs or [])
    except SpecError as exc:
        return invalid_job(str(exc))
    return task, new.name or module.class_.strip()


def exported_job_task(value: str, name: str) -> tuple[str, str] | JsonResponse:
    """A .pt2 sent as base64 (line breaks allowed): checked by its zip and JSON graph, never
    loaded here (agent.exported_task loads it inside the sandbox)."""
    text = "".join(value.split())
    if len(text) > (MAX_EXPORTED_BYTES + 2) // 3 * 4:
        return invalid_job(f"the .pt2 file is more than {MAX_EXPORTED_BYTES} bytes, the limit")
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        return invalid_job(f"`exported_program` is not base64: {exc}")
    name = name or "exported"
    try:
        return exported_task_source(data, name), name
    except SpecError as exc:
        return invalid_job(str(exc))


@api_view(("GET",), auth_required=False)
def job_detail(request, job_id: int):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else JsonResponse(job_json(job))


@api_view(("GET",), auth_required=False)
def turns(request, job_id: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    try:
        since = TurnsQuery.parse(request.GET.dict()).since
    except BadRequest as exc:
        return bad_request(exc)
    rows = list(job.turns.filter(index__gt=since).order_by("index")[:TURN_PAGE])
    return JsonResponse(
        {
            "job": job.pk,
            "state": job.state,
            "since": since,
            "turns": [turn_json(t) for t in rows],
            "last_index": rows[-1].index if rows else since,
            "more": len(rows) == TURN_PAGE,
        }
    )


@api_view(("GET",), auth_required=False)
def turn_detail(request, job_id: int, index: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    turn = job.turns.filter(index=index).first()
    return error(404, "no such turn") if turn is None else JsonResponse(turn_json(turn))


@api_view(("GET",), auth_required=False)
def progress(request, job_id: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    last = job.turns.order_by("-index").values_list("index", flat=True).first()
    now = timezone.now()
    elapsed = None
    if job.started_at:
        elapsed = ((job.finished_at or now) - job.started_at).total_seconds()
    return JsonResponse(
        {
            "state": job.state,
            "step": job.step,
            "reason": job.reason,
            "last_turn": last,
            "turns": job.turns.count(),
            "elapsed_s": elapsed,
            "cancel_requested": job.cancel_requested,
            "best": best_json(job),
        }
    )


@api_view(("POST",))
def cancel(request, job_id: int):
    job = _job_for(request, job_id, change=True)
    if isinstance(job, JsonResponse):
        return job
    job = services.cancel_job(job)
    return JsonResponse(job_json(job))


@api_view(("GET",), auth_required=False)
def artifacts(request, job_id: int):
    job = _job_for(request, job_id)
    if isinstance(job, JsonResponse):
        return job
    return JsonResponse(
        {
            "best_version": job.best_version,
            "files": [
                {"path": a.path, "bytes": len(a.content.encode()), "version": a.version} for a in job.artifacts.all()
            ],
            "evaluation": job.best_evaluation,
        }
    )


@api_view(("GET",), auth_required=False)
def artifacts_zip(request, job_id: int):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else file_views.zip_response(job)


@api_view(("GET",), auth_required=False)
def artifact_file(request, job_id: int, path: str):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else file_views.file_response(job, path)


@api_view(("GET",), auth_required=False)
def trajectory(request, job_id: int):
    job = _job_for(request, job_id)
    return job if isinstance(job, JsonResponse) else file_views.trajectory_response(job)


@api_view(("POST",))
async def evaluate(request):
    """Task + candidate in, sandbox result (with reward) out, in this request. The view is async:
    while the gpu worker evaluates, the request waits as a coroutine, not in a web thread. The
    caller holds one of their gpu places (KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER, shared
    with their jobs and batches) while it runs, so synchronous calls cannot pass that bound: over
    it, 429. Many candidates, or anything slow: POST /api/evaluations (asynchronous)."""
    checked = await sync_to_async(_evaluation_request)(request)
    if isinstance(checked, JsonResponse):
        return checked
    return await evaluate_now(request.api_user, *checked)


def _evaluation_request(request) -> JsonResponse | tuple[str, dict[str, str], dict[str, Any]]:
    """(task, files, sandbox options) of a POST /api/evaluate, or the 400 that says what is wrong."""
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        req = EvaluateRequest.parse(body)
    except BadRequest as exc:
        return bad_request(exc)
    check = check_task_source(req.task)
    if not check.ok:
        return error(400, "invalid task", errors=check.errors)
    problem = evaluations.files_problem(req.files)
    if problem:
        return error(400, problem)
    try:
        opts = services.normalize_options(req.options or {})
    except services.InvalidJob as exc:
        return error(400, "invalid options", errors=exc.errors)
    return req.task, req.files, {k: opts[k] for k in SANDBOX_OPTION_KEYS}


async def evaluate_now(user, task: str, files: dict[str, str], options: dict[str, Any]) -> JsonResponse:
    """Send one evaluation to the gpu queue under a place of the user's and wait for it, polling
    its result between sleeps; the place is given back whatever happens (result, timeout, a lost
    broker)."""
    task_id = uuid.uuid4().hex
    try:
        priority = await sync_to_async(scheduler.reserve_gpu_slot)(user.pk, task_id, wait=False)
    except scheduler.TooManyEvaluations as exc:
        resp = error(429, str(exc), outstanding=exc.outstanding, limit=exc.limit)
        resp["Retry-After"] = str(EVALUATE_RETRY_AFTER_S)
        return resp
    except RedisError:
        resp = error(503, "the evaluation queue does not answer; try again shortly")
        resp["Retry-After"] = "5"
        return resp
    timeout = settings.KERNELWRIGHT_API_EVALUATE_TIMEOUT
    try:
        result = await sync_to_async(services.celery_app().send_task)(
            EVALUATE_TASK,
            kwargs={"task_source": task, "files": files, "options": options, "job_id": None},
            task_id=task_id,
            priority=priority,
        )
        deadline = time.monotonic() + timeout
        while not await sync_to_async(result.ready)():
            if time.monotonic() > deadline:
                await sync_to_async(result.revoke)()
                return error(504, f"the evaluation did not finish within {timeout:.0f} s")
            await asyncio.sleep(EVALUATE_POLL_S)
        data = await sync_to_async(result.get)(timeout=30)
    finally:
        await sync_to_async(scheduler.release_gpu_slot)(user.pk, task_id)
    return JsonResponse(data)
