"""Django settings, all read from the environment.

One file, small typed helpers (the healthchecks `hc/settings.py` pattern). Every value a deployment
changes is an environment variable; the defaults give a working single-machine setup (SQLite under
var/, Redis on localhost). README.md lists the variables.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import dj_database_url

from agent.policy import DEFAULT_MODEL
from sandbox.options import BACKENDS
from webapp.queues import celery_queue_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KERNELWRIGHT_VAR_DIR", BASE_DIR / "var"))


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value is None or value == "" else int(value)


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    return default if value is None or value == "" else float(value)


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envlist(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def redis_settings(redis_url: str) -> dict:
    """Every setting derived from REDIS_URL, in one place so tests can re-point them at another DB."""
    return {
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "CELERY_RESULT_BACKEND": redis_url,
        # https://channels.readthedocs.io/en/stable/topics/channel_layers.html#redis-channel-layer
        "CHANNEL_LAYERS": {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                # socket_timeout None: redis-py 8 defaults to 5 s, which drops idle websocket
                # consumers blocked on the layer (webapp.bench: 197/200 viewers kept, 200/200 with this).
                # msgpack (channels_redis's default, named here so it stays): data only, no code.
                "CONFIG": {
                    "hosts": [{"address": redis_url, "socket_timeout": None}],
                    "capacity": 1000,
                    "expiry": 60,
                    "serializer_format": "msgpack",
                },
            }
        },
        # Shared by the web process and the workers: workers render a turn's HTML once after
        # storing it and the pages reuse it (a per-process cache would never be shared).
        # Values are JSON, never pickles (webapp/cache.py): Django's RedisCache unpickles what it
        # reads, so anything able to write to Redis could otherwise run code in the web server.
        # Nothing else in Redis is a pickle either: Celery messages and results are JSON only
        # (webapp/queues.py, accept_content), channels_redis packs messages with msgpack.
        # While Redis does not answer, a read is a miss and a write does nothing (webapp/core/cache.py):
        # pages are rendered afresh instead of failing.
        "CACHES": {
            "default": {
                "BACKEND": "webapp.core.cache.TolerantJSONRedisCache",
                "LOCATION": redis_url,
                "KEY_PREFIX": "kw",
                "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2},
            }
        },
    }


DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY", "")
if not SECRET_KEY:
    # A development key; a deployment sets SECRET_KEY (sessions signed with this one are not secret).
    SECRET_KEY = "kernelwright-insecure-development-key-set-SECRET_KEY-in-production"
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # daphne first: its runserver replaces Django's, so `manage.py runserver` is ASGI too.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "webapp.core",
    "webapp.jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # https://whitenoise.readthedocs.io/en/stable/django.html: right after SecurityMiddleware.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Innermost: identical GETs of many viewers of one job cost one answer (webapp/core/middleware.py).
    "webapp.core.middleware.CoalesceMiddleware",
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"
ASGI_APPLICATION = "webapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database: a SQLite file under var/ by default, PostgreSQL (or anything dj-database-url parses) via DATABASE_URL.
DATABASE_URL = envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'kernelwright.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Workers, the web server and tests share the file: wait for a lock instead of failing at once.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"].setdefault("OPTIONS", {}).update({"timeout": 20, "transaction_mode": "IMMEDIATE"})
    # Live-server tests run daphne and workers in subprocesses, which cannot see an in-memory test DB;
    # the pid keeps concurrent test sessions from deleting each other's file.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Static files: whitenoise serves them from the finders, so no collectstatic step is needed to run.
# plotly.js comes from the installed plotly package (never a CDN: the product works offline),
# served at {STATIC_URL}plotly/plotly.min.js.
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"  # for `manage.py collectstatic`; whitenoise warns when it is missing
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
_PLOTLY_PACKAGE_DATA = Path(importlib.util.find_spec("plotly").origin).parent / "package_data"
STATICFILES_DIRS = [d for d in [BASE_DIR / "static"] if d.is_dir()] + [("plotly", _PLOTLY_PACKAGE_DATA)]
PLOTLY_STATIC_PATH = "plotly/plotly.min.js"  # the pages' plotly.js under STATIC_URL (webapp.jobs.templatetags)
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Request bodies (webapp/core/limits.py): the web server refuses a body over its limit with 413
# before reading it (Content-Length, or counting a chunked body as it arrives). Prefixes ending
# in "/" cover the paths below them. The views' own limits (a 256 KiB task source, a 20 MiB
# trajectory) say what is wrong with a body under these.
KERNELWRIGHT_MAX_BODY_BYTES = envint(
    "KERNELWRIGHT_MAX_BODY_BYTES", 4 * 1024 * 1024
)  # the API's evaluate: task + 1 MiB of files
KERNELWRIGHT_MAX_TASK_BODY_BYTES = envint(
    "KERNELWRIGHT_MAX_TASK_BODY_BYTES", 1024 * 1024
)  # a 256 KiB task, form or JSON
KERNELWRIGHT_MAX_IMPORT_BODY_BYTES = envint(
    "KERNELWRIGHT_MAX_IMPORT_BODY_BYTES", 21 * 1024 * 1024
)  # a 20 MiB trajectory
KERNELWRIGHT_BODY_LIMITS = [
    ("/jobs/import/", KERNELWRIGHT_MAX_IMPORT_BODY_BYTES, "a trajectory import"),
    ("/jobs/new/", KERNELWRIGHT_MAX_TASK_BODY_BYTES, "a new job"),
    ("/jobs/check/", KERNELWRIGHT_MAX_TASK_BODY_BYTES, "a task check"),
    ("/api/jobs", KERNELWRIGHT_MAX_TASK_BODY_BYTES, "a new job"),
]
# Django's own bound on what it keeps in memory (form fields, request.body), and the size above
# which an uploaded file goes to a temporary file instead of memory.
DATA_UPLOAD_MAX_MEMORY_SIZE = KERNELWRIGHT_MAX_BODY_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = envint("KERNELWRIGHT_FILE_UPLOAD_MAX_MEMORY_SIZE", 1024 * 1024)

# Redis: the Celery broker and result backend and the Channels layer.
globals().update(redis_settings(envstr("REDIS_URL", "redis://127.0.0.1:6379/0")))

# Celery: queues, routes and time limits live in webapp/queues.py; see docs/architecture.md.
CELERY_AGENT_TIME_LIMIT = envint("KERNELWRIGHT_AGENT_TIME_LIMIT", 4 * 3600)
CELERY_COMPILE_TIME_LIMIT = envint("KERNELWRIGHT_COMPILE_TIME_LIMIT", 15 * 60)
CELERY_GPU_TIME_LIMIT = envint("KERNELWRIGHT_GPU_TIME_LIMIT", 30 * 60)
globals().update(
    celery_queue_settings(
        agent_time_limit=CELERY_AGENT_TIME_LIMIT,
        compile_time_limit=CELERY_COMPILE_TIME_LIMIT,
        gpu_time_limit=CELERY_GPU_TIME_LIMIT,
    )
)
# Fairness between users and lost workers (webapp/jobs/scheduler.py). A user runs at most
# MAX_RUNNING_JOBS_PER_USER jobs at once (more wait, in a fair order between users, for a free
# agent slot) and has at most MAX_QUEUED_EVALUATIONS_PER_USER evaluations queued or running on the
# gpu queue (0: no limit). A running job's worker writes a heartbeat every HEARTBEAT_S; one older
# than HEARTBEAT_STALE_S means the worker is gone: the job resumes from its stored turns (or fails
# after 3 starts). AGENT_SLOTS: jobs running at once in all (0: the live agent workers' concurrency).
KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER = envint("KERNELWRIGHT_MAX_RUNNING_JOBS_PER_USER", 2)
KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER = envint("KERNELWRIGHT_MAX_QUEUED_EVALUATIONS_PER_USER", 4)
# Batched evaluations (webapp/jobs/evaluations.py, POST /api/evaluations) and exports
KERNELWRIGHT_EVALUATION_BATCH_MAX = envint("KERNELWRIGHT_EVALUATION_BATCH_MAX", 64)  # candidates in one POST
KERNELWRIGHT_EVALUATIONS_PER_DAY = envint(
    "KERNELWRIGHT_EVALUATIONS_PER_DAY", 2000
)  # candidates one token may post in 24 h
KERNELWRIGHT_EVALUATION_POSTS_PER_MINUTE = envint(
    "KERNELWRIGHT_EVALUATION_POSTS_PER_MINUTE", 30
)  # POSTs per token per minute
KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS = envlist(
    "KERNELWRIGHT_WEBHOOK_ALLOWED_NETWORKS", []
)  # CIDRs a webhook may reach though not public
KERNELWRIGHT_WEBHOOK_TIMEOUT_S = envfloat(
    "KERNELWRIGHT_WEBHOOK_TIMEOUT_S", 5.0
)  # the gpu worker waits this long on a webhook
KERNELWRIGHT_EXPORT_MAX_JOBS = envint("KERNELWRIGHT_EXPORT_MAX_JOBS", 500)  # jobs in one dataset export
KERNELWRIGHT_TASK_LIBRARY = envlist(
    "KERNELWRIGHT_TASK_LIBRARY", [str(BASE_DIR / "benchmarks" / "tasks"), str(VAR_DIR / "task-library" / "tasks")]
)
KERNELWRIGHT_HEARTBEAT_S = envfloat("KERNELWRIGHT_HEARTBEAT_S", 5.0)
KERNELWRIGHT_HEARTBEAT_STALE_S = envfloat("KERNELWRIGHT_HEARTBEAT_STALE_S", 30.0)
KERNELWRIGHT_DISPATCH_TIMEOUT_S = envfloat("KERNELWRIGHT_DISPATCH_TIMEOUT_S", 60.0)
KERNELWRIGHT_MONITOR_INTERVAL_S = envfloat("KERNELWRIGHT_MONITOR_INTERVAL_S", 5.0)
KERNELWRIGHT_AGENT_SLOTS = envint("KERNELWRIGHT_AGENT_SLOTS", 0)

# GPU worker pool (docs/gpu-pool.md): every worker imports webapp.pool at start; its task signals
# record which worker (and which CUDA_VISIBLE_DEVICES) ran each gpu-queue task, and from when to
# when, so that "no two timings shared a GPU" can be checked after the fact.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#include
CELERY_INCLUDE = ["webapp.pool"]

# The model endpoint (any OpenAI-compatible server) and the sandbox backend.
OPENAI_BASE_URL = envstr("OPENAI_BASE_URL", "")
OPENAI_API_KEY = envstr("OPENAI_API_KEY", "")
KERNELWRIGHT_MODEL = envstr("KERNELWRIGHT_MODEL", DEFAULT_MODEL)
# What a gpu worker evaluates a job's backend "auto" on: auto (cuda when the host has an NVIDIA
# device, else cpu), cpu or cuda (sandbox.options.resolve_backend, applied by the gpu worker; the
# agent and web hosts need no GPU and ignore it, except /healthz reporting this host's).
KERNELWRIGHT_BACKEND = envstr("KERNELWRIGHT_BACKEND", "auto").strip().lower()
if KERNELWRIGHT_BACKEND not in BACKENDS:
    raise ValueError(f"KERNELWRIGHT_BACKEND must be one of {', '.join(BACKENDS)}, not {KERNELWRIGHT_BACKEND!r}")
# POST /api/evaluate waits this long for its result in the request (504 after; docs/webapp.md).
KERNELWRIGHT_API_EVALUATE_TIMEOUT = envfloat("KERNELWRIGHT_API_EVALUATE_TIMEOUT", 900.0)

# /healthz: how long to wait for workers to answer a broadcast.
HEALTH_WORKER_TIMEOUT = envfloat("KERNELWRIGHT_HEALTH_WORKER_TIMEOUT", 1.0)
# who sees worker names, the model endpoint URL and error texts on /healthz and /health/, and
# the echo websocket: "auto" (everyone when ALLOWED_HOSTS are loopback names only, else staff),
# "everyone" or "staff" (webapp/core/operator_view.py)
KERNELWRIGHT_OPERATOR_VIEW = envstr("KERNELWRIGHT_OPERATOR_VIEW", "auto")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
