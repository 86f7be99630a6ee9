"""What a job is in the database: the task, its options and state, its stored turns and best files.

Turns are the unit the browser fetches: each row holds the trajectory events of one turn
(agent/events.py, verbatim) plus a few denormalised numbers (reward, speedups, tokens) so that
lists and charts never have to walk every event of every turn.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models

from agent.task import task_hash as agent_task_hash
from webapp.jobs.results import BestResult, SpeedReport


def task_hash(source: str) -> str:
    """The task's hash, as everywhere else (agent.task.task_hash: the sandbox's, so the job, its
    evaluations, evaluation.json and the zip README agree)."""
    return agent_task_hash(source)


class Job(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Visibility(models.TextChoices):
        PRIVATE = "private"
        PUBLIC = "public"

    class Origin(models.TextChoices):
        RUN = "run"  # run by our agent on our workers
        IMPORTED = "imported"  # a trajectory JSON uploaded by a user
        GALLERY = "gallery"  # loaded by `manage.py load_gallery`

    TERMINAL = (State.SUCCEEDED, State.FAILED, State.CANCELLED)

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs"
    )
    name = models.CharField(max_length=200)
    source = models.TextField()
    task_hash = models.CharField(max_length=64, db_index=True)
    options = models.JSONField(default=dict)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.RUN)

    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED, db_index=True)
    reason = models.TextField(blank=True, default="")
    step = models.CharField(max_length=200, blank=True, default="")
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)  # how many times a worker started (or resumed) it
    # The fair queue and lost workers (webapp/jobs/scheduler.py): when the job was last handed to
    # the agent queue (null: waiting for a slot, or not queued), and the last sign of life of the
    # attempt running it (the agent worker writes it every few seconds; a stale one means that
    # worker is gone, and the job is resumed or failed with a reason).
    dispatched_at = models.DateTimeField(null=True, blank=True)
    scheduled = models.BooleanField(default=True)  # False: run by hand (tests, the benchmark), never dispatched
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    visibility = models.CharField(max_length=16, choices=Visibility.choices, default=Visibility.PRIVATE)
    gallery = models.BooleanField(default=False)
    # A gallery case study's stable key (its fixture's file name) and the hash of the trajectory
    # loaded: loading again updates the same row in place, so its URL never changes.
    gallery_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    gallery_digest = models.CharField(max_length=64, blank=True, default="")
    share_token = models.CharField(max_length=64, null=True, blank=True, unique=True)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)  # services set it on every change viewers see (keys caches)

    best_version = models.IntegerField(null=True, blank=True)
    best_reward = models.IntegerField(null=True, blank=True)
    best_speedup_eager = models.FloatField(null=True, blank=True)
    best_speedup_compile = models.FloatField(null=True, blank=True)
    best_evaluation = models.JSONField(null=True, blank=True)  # sandbox EvalResult dict of the best version
    # best_evaluation is the loop's `final` evaluation (the best confirmed after the last turn),
    # not only the best so far
    best_confirmed = models.BooleanField(default=False)
    summary = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"job {self.pk} {self.name}"

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL

    def save(self, *args, **kwargs):
        """task_hash always follows the source (an imported trajectory's own hash may be another)."""
        fields = kwargs.get("update_fields")
        if self.source and (fields is None or "source" in fields):
            self.task_hash = task_hash(self.source)
            if fields is not None:
                kwargs["update_fields"] = {*fields, "task_hash"}
        super().save(*args, **kwargs)

    def result(self) -> BestResult | None:
        """The job's result, the one every page, the API, the README and the charts show: the best
        verified candidate as its stored evaluation measured it (None: no verified candidate)."""
        if self.best_version is None:
            return None
        ev = self.best_evaluation if isinstance(self.best_evaluation, dict) else None
        return BestResult(
            self.best_version,
            self.best_reward,
            self.best_confirmed,
            SpeedReport.of(ev, self.best_speedup_eager, self.best_speedup_compile),
            str((ev or {}).get("schema") or ""),
        )

    def new_share_token(self) -> str:
        self.share_token = secrets.token_urlsafe(24)
        return self.share_token


class Turn(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="turns")
    index = models.IntegerField()  # the events' `turn`; 0 holds the events before the first turn
    events = models.JSONField(default=list)
    reward = models.IntegerField(null=True, blank=True)
    evaluation = models.JSONField(null=True, blank=True)  # the turn's last EvalResult dict
    speedup_eager = models.FloatField(null=True, blank=True)
    speedup_compile = models.FloatField(null=True, blank=True)
    speed = models.JSONField(
        null=True, blank=True
    )  # the `speed` (intervals) of the evaluation those speedups came from
    best_speedup_eager = models.FloatField(
        null=True, blank=True
    )  # the turn's last new best, vs eager (the chart's best line)
    has_error = models.BooleanField(default=False)
    improved = models.BooleanField(default=False)  # the best candidate changed in this turn
    prompt_tokens = models.IntegerField(default=0)
    completion_tokens = models.IntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    revision = models.PositiveIntegerField(default=0)  # bumped on every store: keys the rendered-HTML cache
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="unique_turn_index")]

    def __str__(self) -> str:
        return f"turn {self.index} of job {self.job_id}"

    def report(self) -> SpeedReport:
        """The turn's speedups (its best-rewarded evaluation's) with their intervals."""
        return SpeedReport.of(None, self.speedup_eager, self.speedup_compile, self.speed)


class Artifact(models.Model):
    """One file of the job's best verified candidate (replaced whenever the best changes)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="artifacts")
    path = models.CharField(max_length=300)
    content = models.TextField()
    version = models.IntegerField(default=0)

    class Meta:
        ordering = ["job", "path"]
        constraints = [models.UniqueConstraint(fields=["job", "path"], name="unique_artifact_path")]


class ApiToken(models.Model):
    """`Authorization: Token <key>` for scripts; the key is shown once, only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, default="")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "") -> tuple[ApiToken, str]:
        key = secrets.token_hex(20)
        return cls.objects.create(user=user, name=name, key_hash=cls.hash_key(key)), key


class Evaluation(models.Model):
    """One candidate of a batch posted to /api/evaluations (webapp.jobs.evaluations): queued in the
    database until its user has a place on the gpu queue, then evaluated by a gpu worker, which
    stores the result here and calls the batch's webhook. Polled by id; no web thread waits."""

    class State(models.TextChoices):
        QUEUED = "queued"  # waiting for a place on the gpu queue (task_id empty) or for a worker
        RUNNING = "running"
        DONE = "done"  # `result` holds the EvalResult dict (whatever the candidate's status)
        FAILED = "failed"  # no result: the worker died on it too often, or the sandbox raised

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluations")
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluations")
    batch = models.CharField(max_length=32, db_index=True)  # shared by the candidates posted together
    index = models.PositiveIntegerField(default=0)  # position in its batch
    task_source = models.TextField()
    task_hash = models.CharField(max_length=64)
    files = models.JSONField(default=dict)
    options = models.JSONField(default=dict)  # the sandbox options (backend, torch_ops, preset)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED, db_index=True)
    reason = models.TextField(blank=True, default="")
    task_id = models.CharField(max_length=64, blank=True, default="")  # the gpu task, once sent
    result = models.JSONField(null=True, blank=True)
    reward = models.IntegerField(null=True, blank=True)
    webhook_url = models.CharField(max_length=500, blank=True, default="")
    webhook_secret = models.CharField(max_length=64, blank=True, default="")  # signs the webhook's body
    webhook_status = models.CharField(max_length=300, blank=True, default="")  # "200", or why it was not delivered
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["owner", "state", "task_id"], name="evaluation_dispatch")]

    def __str__(self) -> str:
        return f"evaluation {self.pk} ({self.state})"
